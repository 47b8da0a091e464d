"""Horovod on Spark and torch.distributed under Spark's TorchDistributor, on a local-cluster
master (two executor JVMs with their own Python workers), under HOROVOD_BACKEND=herring.

One Spark application runs horovod.spark.run and TorchDistributor with "herring" and "gloo"
(about 3-4 min on 2 busy cores); a second one kills a rank mid-training (about 1 min)."""

import os
import sys

import pytest

from engine_jobs import assert_close, run_driver

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "workers"))
import engine_training  # noqa: E402

pytest.importorskip("pyspark", reason="scripts/setup.sh installs requirements/cluster_engines.txt")
# Both executors run on this machine but Spark tells torchrun they are two nodes: the engine then
# needs the interface the ranks share (docs/spark.md).
ENV = {"HERRING_IFACE": "lo"}


@pytest.fixture(scope="module")
def spark_jobs(tmp_path_factory):
    return run_driver("spark_driver.py", ["hvd_run", "td_herring", "td_gloo"], tmp_path_factory.mktemp("spark"),
                      timeout=900, **ENV)


def test_horovod_spark_run_returns_every_ranks_result(spark_jobs):
    results, _, leftovers = spark_jobs
    job = results["hvd_run"]
    assert "error" not in job, job
    ranks = job["result"]
    assert [r["rank"] for r in ranks] == [0, 1] and all(r["size"] == 2 for r in ranks), ranks
    assert all(r["module"] == "hvd_herring.torch" for r in ranks), "horovod.torch was not ours in the executors"
    assert ranks[0]["pid"] != ranks[1]["pid"]
    reference = engine_training.reference_weights()
    for r in ranks:
        assert_close(r["weights"], reference, f"horovod.spark.run rank {r['rank']}")
    assert not leftovers, f"processes left running after the application: {leftovers}"


def test_torch_distributor_herring_trains_like_gloo(spark_jobs):
    results, _, _ = spark_jobs
    herring, gloo = results["td_herring"], results["td_gloo"]
    assert "error" not in herring, herring
    assert "error" not in gloo, gloo
    assert herring["result"]["backend"] == "herring" and herring["result"]["size"] == 2
    assert herring["result"]["rank"] == 0  # TorchDistributor returns rank 0's output
    assert_close(herring["result"]["weights"], engine_training.reference_weights(), "TorchDistributor herring")
    assert_close(herring["result"]["weights"], gloo["result"]["weights"], "TorchDistributor herring vs gloo")


def test_a_rank_killed_in_horovod_spark_run_fails_the_job_naming_it(tmp_path):
    results, run, leftovers = run_driver("spark_driver.py", ["hvd_run_kill"], tmp_path, timeout=600, **ENV)
    job = results["hvd_run_kill"]
    assert "error" in job, f"the job survived a killed rank: {job}"
    assert "Process name: 1" in job["error"] and "Exit code: 137" in job["error"], job["error"]
    # The survivor learnt it from the engine, naming the rank, within the deadline.
    assert "rank 1" in run.output, run.output[-4000:]
    assert not leftovers, f"processes left running after the application: {leftovers}"
