"""TensorFlow beside the rest of hvd_herring: one process importing PyTorch and TensorFlow runs one
engine; a rank killed with SIGKILL makes the others' TensorFlow ops raise within the deadline; the
HOROVOD_BACKEND switch makes horovod.tensorflow / horovod.tensorflow.keras / horovod.keras ours
and leaves Horovod untouched when unset; horovodrun still launches; the check entry reports
TensorFlow."""

import importlib.util
import json
import os

import pytest

import checks
import launch

pytestmark = pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None,
                                reason="TensorFlow is not installed (requirements/base.txt installs it)")


def test_torch_and_tensorflow_in_one_process_share_one_engine():
    worker = os.path.join("tests", "tensorflow", "workers", "tf_torch_worker.py")
    run, per_rank = launch.run_with_results(launch.horovodrun, 2, [worker], prefix="herring-tf-torch-", timeout=300)
    checks.assert_every_rank_reported("np2", range(2), run, per_rank)
    assert run.output.count("one engine, shut down from TensorFlow") == 2, run.output[-4000:]
    for check in checks.names_in(worker):
        checks.assert_check_passed("np2", check, run, per_rank)


def test_sigkill_of_a_rank_fails_the_others_tensorflow_ops():
    results = launch.scratch_dir("herring-tf-fault-")
    run = launch.horovodrun(4, [os.path.join("tests", "tensorflow", "workers", "tf_fault_worker.py")], timeout=240,
                            HERRING_TEST_RESULTS=results, HERRING_TEST_VICTIM=2, HERRING_TIMEOUT_SECONDS=30)
    assert run.returncode != 0, run.output[-3000:]
    for r in (0, 1, 3):
        path = os.path.join(results, f"{r}.json")
        assert os.path.exists(path), f"rank {r} did not report\n{run.output[-4000:]}"
        with open(path) as f:
            outcome = json.load(f)
        assert outcome["error"] and outcome["is_tf_error"], outcome
        assert "rank 2" in outcome["error"], outcome
        assert outcome["seconds_to_error"] < 30, outcome
    assert not os.path.exists(os.path.join(results, "2.json"))


PROBE = """
import sys
import horovod.tensorflow as hvd, horovod.tensorflow.keras as hk, horovod.keras as k2
import horovod.tensorflow.mpi_ops as m, horovod.tensorflow.keras.callbacks as cb
import hvd_herring.tensorflow as direct, hvd_herring.tensorflow.mpi_ops as direct_m
print("modules", hvd.__name__, hk.__name__, k2 is hk, m is direct_m, direct is hvd,
      cb.BroadcastGlobalVariablesCallback.__module__)
"""


def test_with_the_switch_horovod_tensorflow_and_keras_are_herring():
    run = launch.python(["-c", PROBE], timeout=180)
    assert run.returncode == 0, run.output[-4000:]
    assert ("modules hvd_herring.tensorflow hvd_herring.tensorflow.keras True True True "
            "hvd_herring.tensorflow.keras.callbacks") in run.output, run.output[-3000:]


def test_without_the_switch_horovod_tensorflow_is_untouched():
    # Horovod installed without TensorFlow support refuses, as it always did.
    run = launch.python(["-c", "import horovod.tensorflow"], HOROVOD_BACKEND=None)
    assert run.returncode != 0
    assert "Extension horovod.tensorflow has not been built" in run.output, run.output[-3000:]


def test_horovodrun_check_build_sees_tensorflow():
    run = launch._run([os.path.join(launch.BIN, "horovodrun"), "--check-build"], launch.herring_env(), 180)
    assert run.returncode == 0, run.output
    assert "[X] TensorFlow" in run.output and "[X] PyTorch" in run.output and "[X] Gloo" in run.output, run.output


def test_check_entry_reports_tensorflow_ops():
    run = launch.python(["-m", "hvd_herring.check"])
    assert run.returncode == 0, run.output
    assert "[X] TensorFlow 2.21.0 (ops built:" in run.output, run.output
