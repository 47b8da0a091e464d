"""An idle rank invited to a peer's cycle (IdleJoinPatience): it waits for its own threads' request
while such joins are wasted, and still joins with nothing of its own where that is what the others
wait for. Shown with the engine's counters, not with timings, on 4 ranks of this machine's 2 cores."""

import os

import launch

WORKER = os.path.join("tests", "engine", "workers", "idle_join_worker.py")
NP = 4


def test_lockstep_calls_take_one_cycle_each_and_non_members_still_join():
    run, per_rank = launch.run_with_results(launch.horovodrun, NP, [WORKER], prefix="herring-idle-join-", timeout=180)
    assert run.returncode == 0, run.output[-6000:]
    for r in range(NP):
        seen = per_rank[r]
        assert seen["lockstep_ok"], f"rank {r}: wrong sums in the lockstep phase"
        lockstep = seen["lockstep"]
        # One cycle per call, give or take the joins that taught the patience (it grows fourfold
        # from 50 us per wasted join: five reach 50 ms); an empty join in every call would show
        # twice as many cycles.
        assert lockstep["cycles"] <= seen["lockstep_calls"] + 20, f"rank {r}: {lockstep}"
        assert lockstep["wasted_empty_joins"] <= 20, f"rank {r}: {lockstep}"
        helped = seen["helped"]
        if r in (0, 1):
            assert seen["helped_ok"], f"rank {r}: wrong sums on the process set [0, 1]"
        else:
            # Every allreduce of the pair needed this sleeping rank's loop in its cycle.
            assert helped["empty_joins"] - helped["wasted_empty_joins"] >= seen["helped_calls"], f"rank {r}: {helped}"
