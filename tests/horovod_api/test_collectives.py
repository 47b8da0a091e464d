"""Every collective and dtype of Horovod's torch API on the herring engine, run inside real
ranks launched by horovodrun (and mpirun), compared with references computed from every rank's
inputs. One launch runs every check; each check is reported as its own test."""

import os
import shutil

import pytest

import launch

WORKER = os.path.join("tests", "horovod_api", "workers", "collectives_worker.py")
CHECK_NAMES = [
    "allreduce_every_dtype_and_op", "allreduce_bool_min_max", "allreduce_in_place_async_poll_and_scaling",
    "allreduce_results_bitwise_identical_on_every_rank", "allreduce_large_tensor_through_chunks",
    "allreduce_empty_and_scalar", "synchronous_calls_read_tensors_in_cpp", "allreduce_non_contiguous_input", "many_small_tensors_are_fused",
    "grouped_allreduce_variants", "grouped_collectives_with_mixed_dtypes", "allgather_first_dimension_differs_per_rank",
    "grouped_allgather_and_empty_contribution", "broadcast_from_every_root_and_dtype",
    "broadcast_object_and_allgather_object", "alltoall_with_and_without_splits",
    "reducescatter_uneven_rows_and_ops", "grouped_reducescatter", "gradients_of_collectives",
    "sync_batch_norm_uses_the_global_batch_on_cpu",
    "barrier_and_join", "static_and_dynamic_process_sets", "bad_input_is_rejected_locally",
    "handles_own_their_request", "mismatches_raise_on_every_rank_then_the_next_collective_works",
    "forked_child_gets_a_clear_error", "a_tensor_in_flight_keeps_its_memory",
    "a_second_init_keeps_the_handles_in_flight", "engine_threads_are_named",
]

# name -> (launcher, processes launched, extra environment). Dedicated servers are the last
# launched processes and report nothing: only workers run the checks.
CONFIGS = {
    "herring-np3": ("horovodrun", 3, {}),
    "ring-np3": ("horovodrun", 3, {"HERRING_ALLREDUCE": "ring"}),
    "herring-2hosts-np4": ("horovodrun", 4, {"HERRING_SIMULATED_HOSTS": "2"}),
    # 3 simulated hosts x 2 ranks with lazy connections (the default): every check's values
    # against its reference while each rank connects only to the peers it uses (issue 27).
    "herring-3hosts-np6": ("horovodrun", 6, {"HERRING_SIMULATED_HOSTS": "2", "HERRING_CONNECTIONS": "lazy"}),
    "herring-2hosts-2servers": ("horovodrun", 6, {"HERRING_SIMULATED_HOSTS": "2", "HERRING_DEDICATED_SERVERS": "2"}),
    "herring-2hosts-2servers-r2sp": ("horovodrun", 6, {"HERRING_SIMULATED_HOSTS": "2", "HERRING_DEDICATED_SERVERS": "2",
                                                       "HERRING_SCHEDULE": "r2sp"}),
    "herring-mpirun-np3": ("mpirun", 3, {}),
    "nocache-np3": ("horovodrun", 3, {"HOROVOD_CACHE_CAPACITY": "0"}),
}


def workers(name):
    launcher, np, extra = CONFIGS[name]
    return np - int(extra.get("HERRING_DEDICATED_SERVERS", 0))


def run_worker(launcher, np, extra):
    results_dir = launch.scratch_dir("herring-results-")
    env = dict(extra, HERRING_TEST_RESULTS=results_dir, HOROVOD_DYNAMIC_PROCESS_SETS="1")
    fn = launch.horovodrun if launcher == "horovodrun" else launch.mpirun
    args = [WORKER]
    if env.pop("HERRING_SIMULATED_HOSTS", None):
        # Ranks 0,1 report one host name and ranks 2,3 another: two shared-memory groups joined
        # by the parameter servers over TCP, on one machine.
        args = [launch.AS_SIMULATED_HOST, "2", WORKER]
    run = fn(np, args, timeout=600, **env)
    per_rank = launch.rank_results(results_dir, np)
    shutil.rmtree(results_dir, ignore_errors=True)
    return run, per_rank


@pytest.fixture(scope="module", params=list(CONFIGS))
def launched(request):
    launcher, np, extra = CONFIGS[request.param]
    run, per_rank = run_worker(launcher, np, extra)
    return request.param, np, run, per_rank


def test_every_rank_reported(launched):
    name, np, run, per_rank = launched
    assert sorted(per_rank) == list(range(workers(name))), f"{name}: ranks reported {sorted(per_rank)}\n{run.output[-4000:]}"
    assert run.returncode == 0, f"{name}: exit status {run.returncode}\n{run.output[-6000:]}"


@pytest.mark.parametrize("check", CHECK_NAMES)
def test_check(launched, check):
    name, np, run, per_rank = launched
    for r, data in sorted(per_rank.items()):
        assert check in data["results"], f"{name}: rank {r} did not run {check}"
        assert data["results"][check] == "ok", f"{name}: rank {r}: {data['results'][check]}"


def test_engine_paths_used(launched):
    name, np, run, per_rank = launched
    counters = per_rank[0]["counters"]
    if name.startswith("ring"):
        assert counters["ring_allreduces"] > 0 and counters["herring_allreduces"] == 0, counters
    else:
        assert counters["herring_allreduces"] > 0, counters
    if "servers" in name:
        assert counters["server_pushes"] > 0 and counters["server_ranges"] == 0, counters  # shards elsewhere
    elif "hosts" in name:
        assert counters["server_ranges"] > 0, counters   # the cross-host PS path ran
    if name.startswith("nocache"):
        assert counters["cache_hits"] == 0, counters
