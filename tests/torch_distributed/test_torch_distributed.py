"""torch.distributed with backend "herring" (hvd_herring.torch.distributed), run inside real ranks
launched by torchrun, horovodrun and mpirun: every collective and dtype, DDP (plain, fp16
compression, PowerSGD, torch.compile), FSDP2, subgroups, one engine beside Horovod's API, and the
errors (mismatch, timeout, peer death), against single-process references. One launch runs every
check; each check is reported as its own test."""

import os
import shutil

import pytest

import launch

WORKER = os.path.join("tests", "torch_distributed", "workers", "torch_distributed_worker.py")
CHECK_NAMES = [
    "all_reduce_every_dtype_and_op", "all_reduce_async_work_and_future",
    "same_collectives_in_flight_pair_in_program_order_and_hit_the_cache", "broadcast_from_every_root_and_dtype",
    "all_gather_and_all_gather_into_tensor", "reduce_scatter_and_reduce_scatter_tensor",
    "all_to_all_and_all_to_all_single", "reduce_gather_scatter", "barrier_send_recv_and_coalesced",
    "subgroups_are_process_sets", "one_engine_with_horovods_api",
    "synchronous_calls_run_their_cycles_on_the_caller", "ddp_training_identical_to_reference",
    "ddp_with_average_hook_and_bucket_view", "ddp_buckets_move_into_zero_copy_memory",
    "async_all_reduces_of_one_tensor_in_flight_together", "a_tensor_in_flight_keeps_its_memory",
    "ddp_with_fp16_compress_hook", "ddp_with_powersgd", "ddp_with_torch_compile",
    "fsdp2_training_equal_to_reference", "mismatched_collectives_are_named",
    "timeouts_raise_and_the_collective_can_still_complete",
]
LAUNCHERS = {"torchrun": launch.torchrun, "horovodrun": launch.horovodrun, "mpirun": launch.mpirun}
# name -> (launcher, ranks); the first runs as a torch user has it, without Horovod installed (every
# import of it fails in the ranks; HOROVOD_BACKEND unset).
CONFIGS = {
    "torchrun-np2-without-horovod": ("torchrun", 2),
    "torchrun-np3": ("torchrun", 3),
    "horovodrun-np2": ("horovodrun", 2),
    "horovodrun-np3": ("horovodrun", 3),
    "mpirun-np2": ("mpirun", 2),
}
EXPECTED_LAUNCHER = {"torchrun": "torchrun", "horovodrun": "horovodrun", "mpirun": "mpirun"}


def run_worker(launcher, np, options=(), **env):
    results_dir = launch.scratch_dir("herring-torch-dist-")
    if options:
        env["options"] = options  # torchrun's and horovodrun's own flags
    run = LAUNCHERS[launcher](np, [WORKER], timeout=600, HERRING_TEST_RESULTS=results_dir, **env)
    per_rank = launch.rank_results(results_dir, np)
    shutil.rmtree(results_dir, ignore_errors=True)
    return run, per_rank


@pytest.fixture(scope="module", params=list(CONFIGS))
def launched(request):
    launcher, np = CONFIGS[request.param]
    env = {"HERRING_TEST_WITHOUT_HOROVOD": "1", "HOROVOD_BACKEND": None} if "without-horovod" in request.param else {}
    run, per_rank = run_worker(launcher, np, **env)
    return request.param, launcher, np, run, per_rank


def test_every_rank_reported(launched):
    name, launcher, np, run, per_rank = launched
    assert sorted(per_rank) == list(range(np)), f"{name}: ranks reported {sorted(per_rank)}\n{run.output[-4000:]}"
    assert run.returncode == 0, f"{name}: exit status {run.returncode}\n{run.output[-6000:]}"
    for r, data in per_rank.items():
        assert data["launcher"] == EXPECTED_LAUNCHER[launcher], (r, data["launcher"])  # rank/size from one place


@pytest.mark.parametrize("check", CHECK_NAMES)
def test_check(launched, check):
    name, launcher, np, run, per_rank = launched
    for r, data in sorted(per_rank.items()):
        assert check in data["results"], f"{name}: rank {r} did not run {check}"
        assert data["results"][check] == "ok", f"{name}: rank {r}: {data['results'][check]}"


def test_ddp_buckets_stay_in_ordinary_memory_with_the_knob_off():
    check = "ddp_buckets_move_into_zero_copy_memory"
    run, per_rank = run_worker("torchrun", 2, HERRING_DIST_ZERO_COPY="0", HERRING_TEST_ONLY=check)
    assert sorted(per_rank) == [0, 1], f"ranks reported {sorted(per_rank)}\n{run.output[-4000:]}"
    for r, data in sorted(per_rank.items()):
        assert data["results"] == {check: "ok"}, f"rank {r}: {data['results']}"


@pytest.mark.parametrize("launcher,np,scenario", [("torchrun", 3, "peer_death"), ("horovodrun", 2, "peer_death"),
                                                   ("torchrun", 2, "ddp_peer_death")])
def test_peer_death_raises_on_every_rank_naming_the_rank(launcher, np, scenario):
    # torchrun looks at its ranks every 0.1 s and SIGTERMs the survivors as soon as one died, on
    # any backend: on a loaded machine it could end a survivor between its error and its report
    # (a fresh-clone run met that once). Looking every 5 s leaves the survivors time to report
    # what they raised; the worker still checks that they raised well within the deadline.
    options = ["--monitor-interval", "5"] if launcher == "torchrun" else []
    run, per_rank = run_worker(launcher, np, options=options, HERRING_TORCH_SCENARIO=scenario)
    survivors = [r for r in range(np) if r != 1]
    assert sorted(per_rank) == survivors, f"ranks reported {sorted(per_rank)}\n{run.output[-4000:]}"
    for r in survivors:
        assert per_rank[r]["results"][scenario] == "ok", f"rank {r}: {per_rank[r]['results'][scenario]}"
