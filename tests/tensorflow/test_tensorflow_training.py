"""Unchanged Horovod-style TensorFlow training on the herring engine, under horovodrun at np=2 and
np=4: a GradientTape loop with DistributedGradientTape gives what one process trained on every
rank's data gives, with identical weights on every rank; Keras 3 model.fit with
DistributedOptimizer and BroadcastGlobalVariablesCallback turns ranks that start from different
random weights into identical ones (equal to the single-process reference), and
MetricAverageCallback averages the metrics."""

import importlib.util
import os

import pytest

import launch
import training_results

pytestmark = [pytest.mark.fast,  # the fast tier (tests/conftest.py)
              pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None,
                                 reason="TensorFlow is not installed (requirements/base.txt installs it)")]


def run(worker, np_, **env):
    r, per_rank = launch.run_with_results(launch.horovodrun, np_, [os.path.join("tests", "tensorflow", "workers", worker)],
                                          prefix="herring-tf-train-", timeout=600, HOROVOD_STALL_CHECK_TIME_SECONDS="30",
                                          **env)
    assert r.returncode == 0, r.output[-6000:]
    return {rank: per_rank[rank] for rank in range(np_)}


def trained_by(worker, name):
    """A module fixture `name`: (np, {rank: results}) of `worker`, trained at np=2 and at np=4."""
    @pytest.fixture(scope="module", params=[2, 4], name=name)
    def trained(request):
        return request.param, run(worker, request.param)
    return trained


tape_trained = trained_by("tf_training_worker.py", "tape_trained")  # GradientTape
keras_trained = trained_by("tf_keras_worker.py", "keras_trained")  # Keras model.fit


# --- GradientTape ---------------------------------------------------------------------------------

TAPE_VARIANTS = ["function", "eager", "groups", "num_groups"]


@pytest.mark.parametrize("variant", TAPE_VARIANTS)
def test_gradient_tape_matches_single_process_reference(tape_trained, variant):
    np_, results = tape_trained
    training_results.assert_matches_reference(results, variant, f"np={np_} ")


@pytest.mark.parametrize("variant", TAPE_VARIANTS)
def test_gradient_tape_weights_identical_on_every_rank(tape_trained, variant):
    np_, results = tape_trained
    assert all(res["results"][variant]["identical"] for res in results.values())


@pytest.mark.parametrize("variant", ["function", "eager"])
def test_traced_steps_are_negotiated_from_the_cache(tape_trained, variant):
    # The step's collectives keep their names from step to step (graph node names, or the
    # reduction's own tf.function when eager): after the first steps no coordinator round.
    np_, results = tape_trained
    for rank, res in results.items():
        early, late = (res["results"][variant]["counters"][k] for k in ("after_step_2", "after_last_step"))
        assert late["coordinator_rounds"] == early["coordinator_rounds"], (rank, early, late)
        assert late["cache_hits"] > early["cache_hits"], (rank, early, late)


# --- Keras model.fit ------------------------------------------------------------------------------

KERAS_VARIANTS = ["graph", "eager", "backward_passes_2", "groups_fp16_warmup"]


@pytest.mark.parametrize("variant", KERAS_VARIANTS)
def test_keras_fit_ends_with_identical_weights(keras_trained, variant):
    np_, results = keras_trained
    for rank, res in results.items():
        assert res["results"][variant]["identical"], f"np={np_} rank {rank} {variant}"


@pytest.mark.parametrize("variant", ["graph", "eager", "backward_passes_2"])
def test_keras_fit_matches_single_process_reference(keras_trained, variant):
    np_, results = keras_trained
    training_results.assert_matches_reference(results, variant, f"np={np_} ")


@pytest.mark.parametrize("variant", KERAS_VARIANTS)
def test_keras_metrics_are_averaged_over_ranks(keras_trained, variant):
    np_, results = keras_trained
    training_results.assert_metrics_averaged(results, variant, np_)


def test_keras_learning_rate_warmup(keras_trained):
    np_, results = keras_trained
    training_results.assert_learning_rate_warmup(results, np_)


def test_keras_backward_passes_count_every_pass(keras_trained):
    np_, results = keras_trained
    for res in results.values():
        steps = res["steps_per_epoch"] * 3
        assert res["results"]["backward_passes_2"]["iterations"] == steps
