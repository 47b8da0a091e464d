"""horovod.tensorflow.keras.callbacks.BestModelCheckpoint (Horovod's Spark KerasEstimator takes one
as its checkpoint_callback and names the file itself), under Keras 3 and Keras 2: made without a
file, given one later, it saves the best epoch's model there; mode='auto' keeps Horovod's (Keras 2's)
meaning under Keras 3."""

import os
import subprocess
import sys

import pytest

pytest.importorskip("tensorflow")

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workers", "best_checkpoint_worker.py")


@pytest.mark.parametrize("legacy, flavour, made_with", [("0", "keras3", "best.keras"), ("1", "keras2", "None")])
def test_best_model_checkpoint_saves_the_best_model_where_it_is_told(tmp_path, legacy, flavour, made_with):
    env = dict(os.environ, HOROVOD_BACKEND="herring", TF_USE_LEGACY_KERAS=legacy, TF_CPP_MIN_LOG_LEVEL="2")
    run = subprocess.run([sys.executable, WORKER, str(tmp_path)], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-4000:]
    result = [line for line in run.stdout.splitlines() if line.startswith("RESULT")]
    assert result == [f"RESULT {flavour} made_with={made_with} best_only=True falling=True same=True"], run.stdout
    # mode='auto' on a metric the model was not compiled with minimises it (0.3, then 0.1: not 0.5).
    assert "AUTO [0, 2]" in run.stdout.splitlines(), run.stdout
    assert os.path.exists(tmp_path / "best.h5")
