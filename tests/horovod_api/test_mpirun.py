"""The same training job launched by mpirun (Open MPI) instead of horovodrun."""

import json
import os

import pytest

import launch

pytestmark = pytest.mark.fast  # the fast tier (tests/conftest.py)


def test_training_under_mpirun_matches_the_reference():
    results = launch.scratch_dir("herring-mpi-")
    run = launch.mpirun(3, [os.path.join("tests", "horovod_api", "workers", "training_worker.py")], timeout=300,
                        HERRING_TEST_RESULTS=results)
    assert run.returncode == 0, run.output[-6000:]
    for rank in range(3):
        with open(os.path.join(results, f"{rank}.json")) as f:
            res = json.load(f)["results"]
        for variant in ("default", "num_groups", "groups"):
            assert res[variant]["max_diff"] < 2e-5, (rank, variant, res[variant]["max_diff"])
            assert res[variant]["identical"]
