"""Horovod on Ray (horovod.ray.RayExecutor) and torch.distributed under Ray Train's TorchTrainer
with TorchConfig(backend="herring"), on a local Ray cluster, under HOROVOD_BACKEND=herring.

One Ray application runs RayExecutor, ElasticRayExecutor and TorchTrainer with "herring" and "gloo"
(about 2-3 min on 2 busy cores); two more kill an actor mid-training, in a static and an elastic
job (under a minute each)."""

import os
import sys

import pytest

from engine_jobs import assert_close, run_driver

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "workers"))
import engine_training  # noqa: E402

pytest.importorskip("ray", reason="scripts/setup.sh installs requirements/cluster_engines.txt")


@pytest.fixture(scope="module")
def ray_jobs(tmp_path_factory):
    return run_driver("ray_driver.py", ["exec", "elastic", "train_herring", "train_gloo"], tmp_path_factory.mktemp("ray"),
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


def test_elastic_ray_executor_returns_every_ranks_result(ray_jobs):
    """horovod.ray.ElasticRayExecutor running hvd.elastic.run with TorchState. Horovod pings every new
    actor with a fixed 10 s deadline (horovod/ray/elastic.py): an actor that starts slower than that on
    a loaded machine fails the job, under any backend."""
    results, _, _ = ray_jobs
    job = results["elastic"]
    assert "error" not in job, job
    ranks = sorted(job["result"], key=lambda r: r["rank"])
    assert [(r["rank"], r["size"]) for r in ranks] == [(0, 2), (1, 2)], ranks
    assert all(r["module"] == "hvd_herring.torch" for r in ranks), "horovod.torch was not ours in the actors"
    reference = engine_training.reference_weights()
    for r in ranks:
        assert_close(r["weights"], reference, f"ElasticRayExecutor rank {r['rank']}")


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


def test_a_killed_actor_under_elastic_ray_ends_the_job_naming_it(tmp_path):
    """Rank 1's actor SIGKILLed at step 2 of an elastic job (min 1 worker). Horovod's elastic driver
    blacklists the failed worker's host (horovod/runner/elastic/registration.py); on this one-host
    Ray cluster that is every host, so Horovod stops the job, naming the failed slot, rather than
    continuing on the survivor (across hosts it continues). The survivor's engine named rank 1 first;
    nothing is left running."""
    results, run, leftovers = run_driver("ray_driver.py", ["elastic_kill"], tmp_path, timeout=600)
    job = results["elastic_kill"]
    assert "error" in job, f"the job neither continued nor failed: {job}"
    assert "Process name: " in job["error"] and "[1]" in job["error"], job["error"]
    assert "lost rank 1: connection closed" in run.output, run.output[-4000:]
    assert "blacklisted slots count == 2 -> stop running" in run.output, run.output[-4000:]
    assert not leftovers, f"processes left running after ray.shutdown(): {leftovers}"
