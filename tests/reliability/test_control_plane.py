"""The hierarchical control plane (HERRING_CONTROL_PLANE=auto across hosts): the ranks of a host
AND their bit vectors in shared memory and the hosts' leaders combine them in a binomial tree
over TCP rooted at rank 0; `tcp` keeps the star through rank 0. Jobs run on simulated hosts
(tests/harness/as_simulated_host.py: ranks of one machine with different host names), launched
by horovodrun; values are checked against references inside the ranks, and the counters
control_messages_sent/received show what each rank handled per cycle. Faults: a non-leader, a
leader and a whole host killed mid-training; every survivor raises naming a lost rank in time.
About 3-4 minutes on the shared 2-core machine."""

import json
import math
import os

import pytest

import launch

AS_HOST = launch.AS_SIMULATED_HOST
COLLECTIVES_WORKER = os.path.join("tests", "horovod_api", "workers", "collectives_worker.py")
STEADY_WORKER = os.path.join("tests", "reliability", "workers", "control_plane_worker.py")
FAULT_WORKER = os.path.join("tests", "reliability", "workers", "fault_worker.py")
TORCH_DIST_WORKER = os.path.join("tests", "torch_distributed", "workers", "torch_distributed_worker.py")


def test_collectives_across_3_hosts_agree_through_the_leaders():
    """Every check of the collectives worker that spans the world, on 3 hosts x 2 ranks: the
    AND, the coordinator's rounds (new names, mismatches named on every rank), joins and
    process sets all go through the hosts' shared memory and the leaders' tree."""
    only = ["allreduce_every_dtype_and_op", "allreduce_results_bitwise_identical_on_every_rank",
            "grouped_allreduce_variants", "allgather_first_dimension_differs_per_rank",
            "broadcast_from_every_root_and_dtype", "alltoall_with_and_without_splits", "barrier_and_join",
            "static_and_dynamic_process_sets", "mismatches_raise_on_every_rank_then_the_next_collective_works"]
    results = launch.scratch_dir("herring-plane-")
    run = launch.horovodrun(6, [AS_HOST, "2", COLLECTIVES_WORKER], timeout=600, HERRING_TEST_RESULTS=results,
                            HOROVOD_DYNAMIC_PROCESS_SETS="1", HERRING_TEST_ONLY=",".join(only),
                            HERRING_CONTROL_PLANE="auto")
    per_rank = launch.rank_results(results, 6)
    assert sorted(per_rank) == list(range(6)) and run.returncode == 0, \
        f"exit status {run.returncode}, ranks reported {sorted(per_rank)}\n{run.output[-6000:]}"
    for r, data in sorted(per_rank.items()):
        for check in only:
            assert data["results"].get(check) == "ok", f"rank {r}: {check}: {data['results'].get(check)}"
    c = {r: data["counters"] for r, data in per_rank.items()}
    # Rank 0 hears from its two children in the leaders' tree each cycle and, in a coordinator
    # round, from them and its own host's other rank: never from every rank (5 per cycle).
    # (A few more for the job's last cycles: the shutdown's agreement may take a round of its own.)
    assert c[0]["control_messages_received"] <= 2 * c[0]["cycles"] + 3 * c[0]["coordinator_rounds"] + 4, c[0]
    assert c[0]["control_messages_received"] > 0, c[0]
    for r in (1, 3, 5):  # not leaders: TCP only for the coordinator's rounds, with their leader
        assert c[r]["control_messages_sent"] == c[r]["coordinator_rounds"], (r, c[r])
        assert c[r]["shm_negotiations"] == c[r]["cycles"], (r, c[r])


def test_a_timed_out_wait_names_the_ranks_that_have_not_issued_it_across_3_hosts():
    """torch.distributed's timeout check (tests/torch_distributed/workers/torch_distributed_worker.py) on 3 hosts x
    2 ranks: a Work that timed out names the ranks missing, as rank 0's coordinator sees them.
    The last rank, not a leader, asks rank 0 across the hosts about a cached collective (which
    only the leaders' ANDs carried), while rank 0's application thread sleeps."""
    check = "timeouts_raise_and_the_collective_can_still_complete"
    results = launch.scratch_dir("herring-plane-")
    run = launch.horovodrun(6, [AS_HOST, "2", TORCH_DIST_WORKER], timeout=600, HERRING_TEST_RESULTS=results,
                            HERRING_TEST_ONLY=check, HERRING_CONTROL_PLANE="auto")
    per_rank = launch.rank_results(results, 6)
    assert sorted(per_rank) == list(range(6)) and run.returncode == 0, \
        f"exit status {run.returncode}, ranks reported {sorted(per_rank)}\n{run.output[-6000:]}"
    for r, data in sorted(per_rank.items()):
        assert data["results"] == {check: "ok"}, f"rank {r}: {data['results']}"


@pytest.mark.parametrize("plane", ["auto", "tcp"])
def test_steady_state_messages_per_cycle_at_rank_0_4_hosts(plane):
    """4 hosts x 2 ranks, cached tiny allreduces: with the star rank 0 receives a contribution
    from each of the 7 other ranks per cycle; in the tree it receives one from each of its
    ceil(log2(4)) = 2 children, the leader of host 2 one from host 3's, and a non-leader none."""
    results = launch.scratch_dir("herring-plane-steady-")
    run = launch.horovodrun(8, [AS_HOST, "2", STEADY_WORKER], timeout=600, HERRING_TEST_RESULTS=results,
                            HERRING_TEST_STEPS="150", HERRING_CONTROL_PLANE=plane)
    per_rank = launch.rank_results(results, 8)
    assert sorted(per_rank) == list(range(8)) and run.returncode == 0, \
        f"exit status {run.returncode}, ranks reported {sorted(per_rank)}\n{run.output[-6000:]}"
    d = {r: data["delta"] for r, data in per_rank.items()}
    for r in range(8):
        assert d[r]["cycles"] >= 150 and d[r]["coordinator_rounds"] == 0, (r, d[r])
    per_cycle = {r: (d[r]["control_messages_received"] / d[r]["cycles"], d[r]["control_messages_sent"] / d[r]["cycles"])
                 for r in range(8)}
    print(f"{plane}: (received, sent) per cycle by rank {per_cycle}; seconds per tiny allreduce by rank "
          f"{ {r: round(data['seconds_per_allreduce'] * 1e6) for r, data in per_rank.items()} } us")
    if plane == "tcp":
        # The star: 7 contributions per cycle, one result to each rank (and invitations).
        assert per_cycle[0][0] == pytest.approx(7, abs=0.1), per_cycle[0]
        assert per_cycle[0][1] >= 7, per_cycle[0]
        assert d[1]["shm_negotiations"] == 0, d[1]
    else:
        fan_out = math.ceil(math.log2(4))
        assert per_cycle[0][0] == pytest.approx(fan_out, abs=0.1), per_cycle[0]
        assert per_cycle[0][1] <= 2 * fan_out + 0.05, per_cycle[0]  # results, and invitations at most
        assert 1.95 <= per_cycle[4][0] <= 3.05, per_cycle[4]  # host 3's contribution, rank 0's result (and invitation)
        for r in (1, 3, 5, 7):
            assert d[r]["control_messages_received"] == 0 and d[r]["control_messages_sent"] == 0, (r, d[r])
            assert d[r]["shm_negotiations"] == d[r]["cycles"], (r, d[r])


@pytest.mark.parametrize("victims,what", [("3", "a non-leader"), ("2", "a leader"), ("4,5", "a whole host")])
def test_killed_ranks_across_hosts_fail_every_survivor_in_time(victims, what):
    """3 hosts x 2 ranks training with the hierarchical plane; `what` is SIGKILLed at step 5.
    Every survivor raises HorovodInternalError naming a lost rank within HERRING_TIMEOUT_SECONDS."""
    lost = [int(v) for v in victims.split(",")]
    results = launch.scratch_dir("herring-plane-fault-")
    run = launch.horovodrun(6, [AS_HOST, "2", FAULT_WORKER], timeout=240, HERRING_TEST_RESULTS=results,
                            HERRING_TEST_VICTIM=victims, HERRING_TIMEOUT_SECONDS=30, HERRING_CONTROL_PLANE="auto")
    assert run.returncode != 0, run.output[-3000:]
    for r in range(6):
        path = os.path.join(results, f"{r}.json")
        if r in lost:
            assert not os.path.exists(path), f"victim {r} reported"
            continue
        assert os.path.exists(path), f"{what}: survivor {r} did not report\n{run.output[-4000:]}"
        with open(path) as f:
            outcome = json.load(f)
        assert outcome["error"] and "HorovodInternalError" in outcome["error"], (r, outcome)
        assert any(f"rank {v}" in outcome["error"] for v in lost), (what, r, outcome)
        assert outcome["seconds_to_error"] < 30, (what, r, outcome)
        print(f"{what}: rank {r} raised after {outcome['seconds_to_error']:.2f} s: {outcome['error'][:160]}")
    assert run.seconds < 150, run.seconds
