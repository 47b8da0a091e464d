"""Keras 2 (tf_keras, TF_USE_LEGACY_KERAS=1) as a first-class path, under horovodrun at np=2.

1. Our own training (tests/tensorflow/workers/tf_keras_worker.py, the worker test_tensorflow_training.py runs
   under Keras 3) with tf.keras = Keras 2: model.fit with DistributedOptimizer and
   BroadcastGlobalVariablesCallback turns ranks that start from different random weights into
   identical ones, equal to the single-process reference (also eagerly, with
   backward_passes_per_step=2 and with a legacy optimizer); MetricAverageCallback averages the
   metrics; LearningRateWarmupCallback follows Horovod's schedule; PartialDistributedOptimizer keeps
   a layer local; hvd.load_model restores a saved model (.keras and .h5) with a distributed
   optimizer and its state.
2. Horovod v0.28.1's own TF2 example scripts (examples/tensorflow2/tensorflow2_synthetic_benchmark.py
   and tensorflow2_keras_synthetic_benchmark.py), unchanged, read from a Horovod git mirror
   (HERRING_HOROVOD_MIRROR, default /work/.mirror/horovod+horovod/repo; skipped when absent) and run
   with a small model and few batches.
"""

import importlib.util
import os
import subprocess

import pytest

import launch
import training_results

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None,
                       reason="TensorFlow is not installed (requirements/base.txt installs it)"),
    pytest.mark.skipif(importlib.util.find_spec("tf_keras") is None,
                       reason="tf_keras is not installed (pip install tf_keras==2.21.0)"),
]

NP = 2
VARIANTS = ["graph", "eager", "backward_passes_2", "groups_fp16_warmup", "legacy_optimizer",
            "partial_local_layer", "load_model", "load_model_h5"]
WITH_REFERENCE = ["graph", "eager", "backward_passes_2", "legacy_optimizer"]


@pytest.fixture(scope="module")
def trained():
    r, per_rank = launch.run_with_results(launch.horovodrun, NP, [os.path.join("tests", "tensorflow", "workers",
                                                                             "tf_keras_worker.py")],
                                          prefix="herring-tf-keras2-", timeout=600, HOROVOD_STALL_CHECK_TIME_SECONDS="30",
                                          TF_USE_LEGACY_KERAS="1", HERRING_KERAS_VARIANTS=",".join(VARIANTS))
    assert r.returncode == 0, r.output[-6000:]
    return {rank: per_rank[rank] for rank in range(NP)}


def test_workers_ran_keras2(trained):
    assert all(res["flavour"] == "keras2" for res in trained.values()), trained


@pytest.mark.parametrize("variant", [v for v in VARIANTS if v != "partial_local_layer"])
def test_fit_ends_with_identical_weights(trained, variant):
    for rank, res in trained.items():
        assert res["results"][variant]["identical"], f"rank {rank} {variant}"


@pytest.mark.parametrize("variant", WITH_REFERENCE)
def test_fit_matches_single_process_reference(trained, variant):
    training_results.assert_matches_reference(trained, variant)


@pytest.mark.parametrize("variant", ["graph", "eager", "legacy_optimizer", "groups_fp16_warmup"])
def test_metrics_are_averaged_over_ranks(trained, variant):
    training_results.assert_metrics_averaged(trained, variant, NP)


def test_learning_rate_warmup(trained):
    training_results.assert_learning_rate_warmup(trained, NP)


def test_backward_passes_count_every_pass(trained):
    for res in trained.values():
        assert res["results"]["backward_passes_2"]["iterations"] == res["steps_per_epoch"] * 3


def test_partial_distributed_optimizer_keeps_the_local_layer_local(trained):
    for rank, res in trained.items():
        partial = res["results"]["partial_local_layer"]
        assert partial["shared_identical"], rank
        assert not partial["local_identical"], f"rank {rank}: the local layer trained on each rank's own data"


@pytest.mark.parametrize("variant", ["load_model", "load_model_h5"])
def test_load_model_restores_a_distributed_optimizer(trained, variant):
    for rank, res in trained.items():
        loaded = res["results"][variant]
        assert loaded["distributed"], f"rank {rank}: {loaded['class']} is not distributed with fp16 compression"
        assert loaded["weights_restored"], rank
        assert loaded["loaded_iterations"] == loaded["saved_iterations"] == res["steps_per_epoch"], loaded
        assert loaded["iterations"] == res["steps_per_epoch"] * 3, loaded


# --- Horovod's own example scripts -------------------------------------------------------------------

MIRROR = os.environ.get("HERRING_HOROVOD_MIRROR", "/work/.mirror/horovod+horovod/repo")
HOROVOD_TAG = "v0.28.1"
EXAMPLES = {
    "tensorflow2_synthetic_benchmark.py": ["--num-warmup-batches", "1"],
    "tensorflow2_keras_synthetic_benchmark.py": [],
}


def _example(name):
    """The example script as Horovod published it (never kept in this repository)."""
    if not os.path.isdir(MIRROR):
        pytest.skip(f"no Horovod git mirror at {MIRROR} (set HERRING_HOROVOD_MIRROR)")
    try:
        source = subprocess.run(["git", "-C", MIRROR, "show", f"{HOROVOD_TAG}:examples/tensorflow2/{name}"],
                                check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"cannot read {name} at {HOROVOD_TAG} from {MIRROR}: {e}")
    path = os.path.join(launch.scratch_dir("herring-horovod-example-"), name)
    with open(path, "w") as f:
        f.write(source)
    return path


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_horovod_tf2_example_runs_unchanged_under_keras2(name):
    script = _example(name)
    args = ["--model", "MobileNet", "--batch-size", "4", "--num-iters", "2", "--num-batches-per-iter", "1",
            "--no-cuda"] + EXAMPLES[name]
    r = launch.horovodrun(NP, [script] + args, timeout=600, TF_USE_LEGACY_KERAS="1",
                          HOROVOD_STALL_CHECK_TIME_SECONDS="60")
    assert r.returncode == 0, r.output[-6000:]
    assert "Total img/sec on 2 CPU(s)" in r.output, r.output[-4000:]
