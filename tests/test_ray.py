"""Horovod on Ray (horovod.ray.RayExecutor) and torch.distributed under Ray Train's TorchTrainer
with TorchConfig(backend="herring"), on a local Ray cluster, under HOROVOD_BACKEND=herring.

One Ray application runs RayExecutor and TorchTrainer with "herring" and "gloo" (about 2-3 min on
2 busy cores); a second one kills an actor mid-training (under a minute)."""

import os
import sys

import pytest

from engine_jobs import assert_close, run_driver

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "workers"))
import engine_training  # noqa: E402

pytest.importorskip("ray", reason="scripts/setup.sh installs requirements/cluster_engines.txt")


@pytest.fixture(scope="module")
def ray_jobs(tmp_path_factory):
    return run_driver("ray_driver.py", ["exec", "train_herring", "train_gloo"], tmp_path_factory.mktemp("ray"),
                      timeout=900)


def test_ray_executor_returns_every_ranks_result(ray_jobs):
    results, _, leftovers = ray_jobs
    job = results["exec"]
    assert "error" not in job, job
    ranks = job["result"]
    assert [r["rank"] for r in ranks] == [0, 1] and all(r["size"] == 2 for r in ranks), ranks
    assert all(r["module"] == "hvd_herring.torch" for r in ranks), "horovod.torch was not ours in the actors"
    reference = engine_training.reference_weights()
    for r in ranks:
        assert_close(r["weights"], reference, f"RayExecutor rank {r['rank']}")
    assert not leftovers, f"processes left running after ray.shutdown(): {leftovers}"


def test_ray_train_herring_trains_like_gloo(ray_jobs):
    results, _, _ = ray_jobs
    herring, gloo = results["train_herring"], results["train_gloo"]
    assert "error" not in herring, herring
    assert "error" not in gloo, gloo
    assert [r["rank"] for r in herring["result"]] == [0, 1], herring
    assert all(r["backend"] == "herring" and r["size"] == 2 for r in herring["result"]), herring
    reference = engine_training.reference_weights()
    for h, g in zip(herring["result"], gloo["result"]):
        assert_close(h["weights"], reference, f"Ray Train herring rank {h['rank']}")
        assert_close(h["weights"], g["weights"], f"Ray Train herring vs gloo rank {h['rank']}")


def test_a_killed_actor_fails_the_ray_executor_job_naming_its_rank(tmp_path):
    results, run, leftovers = run_driver("ray_driver.py", ["exec_kill"], tmp_path, timeout=600)
    job = results["exec_kill"]
    assert "error" in job, f"the job survived a killed actor: {job}"
    assert "Horovod rank 1" in job["error"] and "died" in job["error"], job["error"]
    assert not leftovers, f"processes left running after ray.shutdown(): {leftovers}"
