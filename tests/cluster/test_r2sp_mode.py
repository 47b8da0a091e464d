"""R2SP training mode (hvd_herring.torch.R2SPTrainer): server-held parameters, round-robin turns.

Real ranks through horovodrun; every worker's final parameters must equal, bit for bit, what a
single-process replay of the R2SP schedule gives that worker (tests/cluster/workers/r2sp_worker.py)."""

import json
import os

import pytest

import launch

WORKER = os.path.join("tests", "cluster", "workers", "r2sp_worker.py")


def _results(directory, n):
    out = []
    for r in range(n):
        with open(os.path.join(directory, f"{r}.json")) as f:
            out.append(json.load(f))
    return out


@pytest.mark.parametrize("np_, workers, env", [
    (3, 3, {}),                                                                  # colocated shards
    (5, 3, {"HERRING_SIMULATED_HOSTS": "2", "HERRING_DEDICATED_SERVERS": "2"}),  # dedicated servers
], ids=["colocated", "dedicated"])
def test_training_follows_the_round_robin_schedule_exactly(np_, workers, env):
    results = launch.scratch_dir("herring-r2sp-")
    run = launch.horovodrun(np_, [WORKER], timeout=180, HERRING_TEST_RESULTS=results, **env)
    assert run.returncode == 0, run.output[-4000:]
    for r, res in enumerate(_results(results, workers)):
        assert res["started_from_rank0"], (r, res)
        assert res["bitwise"] and res["max_diff"] == 0.0, (r, res)
        assert res["moved"] > 1e-3, (r, res)  # it did train
        assert res["staleness_bound"] == workers - 1
        assert res["layout"]["dedicated"] == bool(env), res["layout"]
        errors = res["errors"]
        assert "parameter 0 (shape (2, 3)) is torch.float64" in errors["float64"], errors
        assert "learning rate must be positive" in errors["lr"], errors
        assert "step() after close()" in errors["closed"], errors


def test_a_worker_that_misses_its_turn_fails_the_job_naming_it():
    results = launch.scratch_dir("herring-r2sp-stall-")
    run = launch.horovodrun(3, [WORKER], timeout=120, HERRING_TEST_RESULTS=results, HERRING_TEST_MODE="stall",
                            HERRING_TEST_PAUSE="8", HOROVOD_STALL_CHECK_TIME_SECONDS="1",
                            HOROVOD_STALL_SHUTDOWN_TIME_SECONDS="3")
    assert "rank 2's push of step 3: waited 1 s" in run.output, run.output[-4000:]
    for r, res in enumerate(_results(results, 3)):
        assert "rank 2's push of step 3 did not arrive within 3 s (HOROVOD_STALL_SHUTDOWN_TIME_SECONDS)" \
            in res["error"], (r, res)
        # Ranks 0 and 1 wait for their turn behind rank 2: they fail at the shutdown time, not
        # when rank 2 wakes up (after 8 s).
        if r < 2:
            assert res["seconds"] < 7, (r, res)


def test_workers_that_take_different_numbers_of_steps_are_reported():
    results = launch.scratch_dir("herring-r2sp-uneven-")
    run = launch.horovodrun(3, [WORKER], timeout=120, HERRING_TEST_RESULTS=results, HERRING_TEST_MODE="uneven")
    assert run.returncode == 0, run.output[-4000:]
    assert ("rank 2's push of step 5 never came: the session ended after rank 1 took 5 steps and rank 2 4"
            in run.output), run.output[-4000:]
