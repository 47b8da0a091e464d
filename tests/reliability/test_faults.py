"""A rank that dies mid-training: every other rank raises within the deadline with a message
naming the lost rank, horovodrun exits non-zero, nothing hangs."""

import json
import os

import launch

WORKER = os.path.join("tests", "reliability", "workers", "fault_worker.py")


def test_sigkill_of_a_rank_mid_training():
    results = launch.scratch_dir("herring-fault-")
    run = launch.horovodrun(4, [WORKER], timeout=180, HERRING_TEST_RESULTS=results, HERRING_TEST_VICTIM=2,
                            HERRING_TIMEOUT_SECONDS=30)
    assert run.returncode != 0, run.output[-3000:]
    survivors = [r for r in range(4) if r != 2]
    for r in survivors:
        path = os.path.join(results, f"{r}.json")
        assert os.path.exists(path), f"rank {r} did not report\n{run.output[-4000:]}"
        with open(path) as f:
            outcome = json.load(f)
        assert outcome["error"], f"rank {r} saw no error: {outcome}"
        assert "HorovodInternalError" in outcome["error"], outcome
        assert "rank 2" in outcome["error"], outcome
        assert outcome["seconds_to_error"] < 30, outcome
    assert not os.path.exists(os.path.join(results, "2.json"))
    assert run.seconds < 120
