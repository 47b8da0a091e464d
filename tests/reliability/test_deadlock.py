"""Ranks that diverge (each waits on a collective that only another, itself waiting, could
complete) raise on every rank within HERRING_DEADLOCK_TIME_SECONDS, naming every rank and the
collective it waits on, and the job goes on. Horovod hangs there. A rank that is merely slow (a
stall) is not a deadlock: its collective completes."""

import importlib.util
import os

import pytest

import launch

WORKER = os.path.join("tests", "reliability", "workers", "deadlock_worker.py")
DEADLOCK_SECONDS = 4


def _run(framework, np, hosts=1):
    results = launch.scratch_dir("herring-deadlock-")
    # On simulated hosts the reports climb the hierarchical control plane's tree.
    args = launch.on_simulated_hosts(np // hosts if hosts > 1 else None, WORKER, framework)
    run = launch.horovodrun(np, args, timeout=180, HERRING_TEST_RESULTS=results,
                            HERRING_DEADLOCK_TIME_SECONDS=DEADLOCK_SECONDS)
    per_rank = launch.rank_results(results, np)
    assert sorted(per_rank) == list(range(np)), f"ranks reported {sorted(per_rank)}\n{run.output[-6000:]}"
    assert run.returncode == 0, run.output[-6000:]
    return per_rank


CASES = [("torch", 2), ("torch", 3)]
if importlib.util.find_spec("tensorflow") is not None:
    CASES.append(("tensorflow", 2))


@pytest.mark.parametrize("framework,np", CASES, ids=[f"{f}-np{n}" for f, n in CASES])
def test_diverged_ranks_raise_on_every_rank_then_the_job_goes_on(framework, np):
    check_diverged(framework, np, _run(framework, np))


def test_diverged_ranks_on_3_hosts_reported_through_the_leaders():
    """3 simulated hosts x 2 ranks, HERRING_CONTROL_PLANE=auto: a non-leader's report reaches
    rank 0 through its host's leader and the leaders' tree; the verdict is the same."""
    check_diverged("torch", 6, _run("torch", 6, hosts=3))


def check_diverged(framework, np, per_rank):
    for r, seen in sorted(per_rank.items()):
        error = seen["deadlock_error"]
        assert error is not None, f"rank {r} got no error"
        # The framework's error type for a failed collective, as in Horovod.
        expected_type = "HorovodInternalError" if framework == "torch" else "FailedPreconditionError"
        assert error.startswith(expected_type) and "Deadlock:" in error, f"rank {r}: {error}"
        for other in range(np):
            # Every rank and the collective it waits on, with who did not submit it.
            assert f"rank {other} waits on allreduce 'diverged.by.rank{other}'" in error, f"rank {r}: {error}"
        assert "HERRING_DEADLOCK_TIME_SECONDS" in error, error
        # Within the deadline: not before the ranks were blocked that long, and not much after.
        assert DEADLOCK_SECONDS * 0.9 <= seen["deadlock_seconds"] <= DEADLOCK_SECONDS + 10, seen
        assert seen["after"] == [float(np)] * 4, f"rank {r}: the job did not go on: {seen['after']}"
        # Then the last rank computes for 1.5x the deadlock time while the others wait: a stall.
        assert seen["stalled"] == [float(np)] * 4, f"rank {r}: a slow rank was taken for a deadlock: {seen}"
