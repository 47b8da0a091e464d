"""The cycle policy: a lone request starts a cycle at once (no fixed cycle-time wait), and a burst
of requests that arrives while a cycle runs is batched into the next ones. Shown with the engine's
counters under a one-minute HOROVOD_CYCLE_TIME, not with timings. A thread waiting on a lone
request runs its cycle itself (HERRING_CALLER_RUNS_CYCLES), or leaves it to the loop's thread:
a large one too where every rank of the host has a CPU, only ones up to
_native.OVERSUBSCRIBED_CALLER_BYTES where the ranks share one."""

import os

import pytest

import launch

pytestmark = pytest.mark.fast  # the fast tier (tests/conftest.py)

WORKER = os.path.join("tests", "engine", "workers", "cycle_policy_worker.py")
NP = 2
CPUS = len(os.sched_getaffinity(0))


def run_job(timeout=120, **env):
    """The worker on NP ranks under a one-minute HOROVOD_CYCLE_TIME: (Run, {rank: what it wrote}).
    test_sanitizers runs it on the sanitized core."""
    results = launch.scratch_dir("herring-cycles-")
    # Under the old policy (a cycle at most once per HOROVOD_CYCLE_TIME) this job would need
    # twenty minutes for its twenty lone allreduces; the launch allows two.
    run = launch.horovodrun(NP, [WORKER], timeout=timeout, HERRING_TEST_RESULTS=results, HOROVOD_CYCLE_TIME=60000,
                            **env)
    return run, launch.rank_results(results, NP)


@pytest.mark.parametrize("caller_runs,one_cpu", [("1", False), ("1", True), ("0", False)],
                         ids=["caller-runs", "caller-runs-one-cpu", "loop-only"])
def test_lone_requests_start_at_once_and_bursts_are_batched(caller_runs, one_cpu):
    if not one_cpu and CPUS < NP:
        pytest.skip(f"needs a CPU per rank ({NP}); this process may use {CPUS}")
    run, per_rank = run_job(HERRING_CALLER_RUNS_CYCLES=caller_runs, HERRING_TEST_ONE_CPU="1" if one_cpu else None)
    assert run.returncode == 0, run.output[-6000:]
    assert sorted(per_rank) == list(range(NP)), f"ranks reported {sorted(per_rank)}\n{run.output[-6000:]}"
    waiter_cycles = limit_waiter_cycles = large_waiter_cycles = 0
    for r, seen in per_rank.items():
        assert seen["lone_sums"] == [float(NP)] * 20, seen
        assert seen["lone_cycles"] >= 20, f"rank {r}: {seen}"  # one cycle each, none waited for
        assert seen["burst_ok"], seen
        # 200 requests submitted in a loop: negotiated in a few cycles (the burst), not 200.
        assert seen["burst_cycles"] <= 20, f"rank {r}: a burst of 200 took {seen['burst_cycles']} cycles"
        assert seen["limit_sums"] == [float(NP)] * 10, seen
        assert seen["large_sums"] == [float(NP)] * 10, seen
        assert seen["cpus"] == (1 if one_cpu else CPUS), seen
        waiter_cycles += seen["lone_waiter_cycles"]
        limit_waiter_cycles += seen["limit_waiter_cycles"]
        large_waiter_cycles += seen["large_waiter_cycles"]
    if caller_runs == "1":
        # A synchronous allreduce does not wake its loop: the waiter runs the cycle. A loop still
        # joins where a peer's invitation woke it before the waiter came, but not on the rank
        # that came first: at least one waiter per cycle, unless a loop was awake for its own reasons.
        assert waiter_cycles > 0, f"no waiter ran a cycle of the 20 lone allreduces on {NP} ranks"
        assert limit_waiter_cycles > 0, f"no waiter ran a cycle of the 10 allreduces at the caller's limit"
        if one_cpu:   # more ranks than CPUs: a larger request is the loop's, never woken for a waiter
            assert large_waiter_cycles == 0, \
                f"{NP} ranks on one CPU, yet waiters ran {large_waiter_cycles} cycles above the caller's limit"
        else:
            assert large_waiter_cycles > 0, f"a CPU per rank, yet no waiter ran a cycle of the 10 large allreduces"
    else:
        ran = waiter_cycles + limit_waiter_cycles + large_waiter_cycles
        assert ran == 0, f"HERRING_CALLER_RUNS_CYCLES=0, yet waiters ran {ran} cycles"
