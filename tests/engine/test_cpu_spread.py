"""HERRING_SPREAD_CPUS: where each rank of the host may have a CPU, a rank whose cycle runs on the
CPU another local rank's cycle is on moves its thread to a free CPU of its mask, and gives the
thread its whole mask back. Shown by putting both ranks' threads on one CPU (the worker says how)
and reading the engine's counter and the thread's mask afterwards."""

import os

import pytest

import launch

WORKER = os.path.join("tests", "engine", "workers", "cpu_spread_worker.py")
NP = 2
CPUS = len(os.sched_getaffinity(0))


@pytest.mark.skipif(CPUS < NP, reason=f"needs a CPU per rank ({NP}); this process may use {CPUS}")
@pytest.mark.parametrize("spread", ["1", "0"])
def test_a_rank_sharing_a_cpu_with_another_moves_off_it_and_keeps_its_mask(spread):
    results = launch.scratch_dir("herring-spread-")
    run = launch.horovodrun(NP, [WORKER], timeout=120, HERRING_TEST_RESULTS=results, HERRING_SPREAD_CPUS=spread)
    assert run.returncode == 0, run.output[-6000:]
    per_rank = launch.rank_results(results, NP)
    assert sorted(per_rank) == list(range(NP)), f"ranks reported {sorted(per_rank)}\n{run.output[-6000:]}"
    for r, seen in per_rank.items():
        assert seen["sums"] == [float(NP)] * len(seen["trials"]), f"rank {r}: {seen['sums']}"
    if spread == "0":
        moves = {r: [t["moves"] for t in seen["trials"]] for r, seen in per_rank.items()}
        assert not any(sum(m) for m in moves.values()), f"HERRING_SPREAD_CPUS=0, yet threads moved: {moves}"
        return
    mover = per_rank[0]
    assert all(t["mask"] == mover["mask"] for t in mover["trials"]), \
        f"rank 0's thread did not get its whole mask back: {mover['trials']}"
    # Rank 1 runs only on that CPU, so rank 0's cycle must leave it. The scheduler may still
    # move rank 0 first, in the microseconds before rank 1 falls asleep, which leaves the engine
    # nothing to do: nearly every trial, not all, must have moved. (Where a move puts the thread is
    # shm_bits_exchange_test's to check; here, after the allreduce, the thread has slept and woken
    # wherever the scheduler put it.)
    moved = [t for t in mover["trials"] if t["moves"] > 0]
    assert len(moved) >= len(mover["trials"]) - 1, \
        f"rank 0 shared CPU {mover['first']} with rank 1 and moved off it in {len(moved)} " \
        f"of {len(mover['trials'])} trials: {mover['trials']}"
