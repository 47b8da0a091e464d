"""The same training job launched by mpirun (Open MPI) instead of horovodrun."""

import os

import pytest

import launch

pytestmark = pytest.mark.fast  # the fast tier (tests/conftest.py)

WORKER = os.path.join("tests", "horovod_api", "workers", "training_worker.py")


def test_training_under_mpirun_matches_the_reference():
    run, per_rank = launch.run_with_results(launch.mpirun, 3, [WORKER], prefix="herring-mpi-", timeout=300)
    assert run.returncode == 0, run.output[-6000:]
    for rank in range(3):
        res = per_rank[rank]["results"]
        for variant in ("default", "num_groups", "groups"):
            assert res[variant]["max_diff"] < 2e-5, (rank, variant, res[variant]["max_diff"])
            assert res[variant]["identical"]
