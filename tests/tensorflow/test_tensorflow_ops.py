"""Every collective of `import horovod.tensorflow as hvd` on the herring engine, eagerly and inside
tf.function, at np=3 under horovodrun, against references computed from every rank's inputs;
gradients; errors. One launch runs every check (tests/tensorflow/workers/tf_ops_worker.py); each check is
reported as its own test. Also what a single process sees: the lazy import that keeps
horovodrun's launch check cheap, the error before init, the error under XLA."""

import importlib.util
import os

import pytest

import checks
import launch

pytestmark = pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None,
                                reason="TensorFlow is not installed (requirements/base.txt installs it)")

WORKER = os.path.join("tests", "tensorflow", "workers", "tf_ops_worker.py")
CHECK_NAMES = checks.names_in(WORKER)
NP = 3


@pytest.fixture(scope="module")
def launched():
    results_dir = launch.scratch_dir("herring-tf-ops-")
    try:
        run = launch.horovodrun(NP, [WORKER], timeout=400, HERRING_TEST_RESULTS=results_dir,
                                HOROVOD_DYNAMIC_PROCESS_SETS="1", HOROVOD_STALL_CHECK_TIME_SECONDS="20")
    except AssertionError as e:  # the job hung and was killed: report the checks that did run
        run = launch.Run(returncode=None, output=str(e), seconds=400)
    per_rank = launch.rank_results(results_dir, NP)
    return run, per_rank


def test_every_rank_reported(launched):
    run, per_rank = launched
    checks.assert_every_rank_reported(f"np{NP}", range(NP), run, per_rank)


@pytest.mark.parametrize("check", CHECK_NAMES)
def test_check(launched, check):
    run, per_rank = launched
    checks.assert_check_passed(f"np{NP}", check, run, per_rank)


def test_the_worker_runs_no_unlisted_check(launched):
    run, per_rank = launched
    assert set(per_rank[0]["results"]) == set(CHECK_NAMES)


def test_tensorflow_ops_went_through_the_herring_engine(launched):
    run, per_rank = launched
    counters = per_rank.get(0, {}).get("counters")
    assert counters, f"rank 0 did not finish\n{run.output[-4000:]}"
    assert counters["herring_allreduces"] > 0 and counters["cache_hits"] > 0, counters


SINGLE_PROCESS = r"""
import sys, time
start = time.monotonic()
import horovod.tensorflow as hvd
print("lazy", "tensorflow" not in sys.modules, hvd.gloo_built(), hvd.__name__)
import tensorflow as tf
try:
    hvd.allreduce(tf.ones(2))
except tf.errors.FailedPreconditionError as e:
    print("before init:", e.message)
hvd.init()
print("size", hvd.size(), hvd.rank(), hvd.allreduce(tf.constant([2.0, 4.0])).numpy().tolist())
try:
    tf.function(lambda x: hvd.allreduce(x), jit_compile=True)(tf.ones(2))
except NotImplementedError as e:
    print("xla:", e)
# A model saved with a DistributedOptimizer loads with plain Keras, and as distributed with
# hvd.load_model, keeping the optimizer's state.
import os, tempfile, keras, numpy as np
import horovod.tensorflow.keras as hk
model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1, momentum=0.9)), loss="mse")
model.fit(np.ones((8, 3)), np.ones((8, 2)), batch_size=4, verbose=0)
with tempfile.TemporaryDirectory() as scratch:
    path = os.path.join(scratch, "model.keras")
    model.save(path)
    plain = keras.models.load_model(path).optimizer
    loaded = hk.load_model(path).optimizer
print("load_model", type(plain).__name__, hasattr(plain, "_hvd_settings"), type(loaded).__name__,
      hasattr(loaded, "_hvd_settings"), int(loaded.iterations.numpy()))
hvd.shutdown()
"""


def test_single_process_import_init_and_errors():
    # A job of one (no launcher): collectives are identities, but still go through the ops.
    run = launch.python(["-c", SINGLE_PROCESS], timeout=180)
    assert run.returncode == 0, run.output[-4000:]
    out = run.output
    # horovodrun's launch check imports horovod.tensorflow and calls gloo_built(): no TensorFlow.
    assert "lazy True True hvd_herring.tensorflow" in out, run.output[-4000:]
    before_init = [line for line in out.splitlines() if line.startswith("before init:")]
    assert before_init and "Horovod has not been initialized; use hvd.init()." in before_init[0], run.output[-4000:]
    assert "size 1 0 [2.0, 4.0]" in out, run.output[-4000:]
    assert "xla: hvd_herring: allreduce cannot run inside an XLA-compiled function" in out, run.output[-4000:]
    assert "load_model SGD False SGD True 2" in out, run.output[-4000:]


ENGINE_REFERENCE = r"""
import horovod.tensorflow as hvd
import tensorflow as tf
from hvd_herring.basics import basics
from hvd_herring.tensorflow import mpi_ops

def not_initialized(fn):
    try:
        fn()
    except tf.errors.FailedPreconditionError as e:
        return "Horovod has not been initialized" in e.message
    return False

hvd.init()
step = tf.function(lambda x: (hvd.allreduce(x, op=hvd.Sum, name="traced"), hvd.rank_op(), hvd.size_op()))
print("round 1", step(tf.constant([1.0, 2.0]))[0].numpy().tolist())
first = basics.engine()
hvd.shutdown()
# The function traced with the first engine: no engine now, so Horovod's error, from every op kind.
print("after shutdown", not_initialized(lambda: step(tf.ones(2))), not_initialized(lambda: hvd.rank_op()))
hvd.init()  # as an elastic reset does: a new engine in the same process
assert basics.engine() is not first
value, rank, size = step(tf.constant([3.0, 4.0]))
print("round 2", value.numpy().tolist(), int(rank), int(size))
# An op whose engine reference was written by another process (a graph loaded from elsewhere) or
# names no slot: the address is never followed, the kernel reports that Horovod is not initialized.
foreign = lambda: mpi_ops._LIB.herring_allreduce(tf.ones(2), reduce_op=int(hvd.Sum), tensor_name="foreign",
                                                 engine_slot=8, engine_owner="another process")
no_slot = lambda: mpi_ops._LIB.herring_allreduce(tf.ones(2), reduce_op=int(hvd.Sum), tensor_name="no_slot")
print("foreign", not_initialized(foreign), not_initialized(no_slot))
hvd.shutdown()
"""


def test_traced_functions_follow_the_front_engine_across_reinit():
    # The kernels find the engine through the slot the Python front owns (native/engine/engine_slot.h).
    run = launch.python(["-c", ENGINE_REFERENCE], timeout=180)
    assert run.returncode == 0, run.output[-4000:]
    out = run.output
    assert "round 1 [1.0, 2.0]" in out, out[-4000:]
    assert "after shutdown True True" in out, out[-4000:]
    assert "round 2 [3.0, 4.0] 0 1" in out, out[-4000:]
    assert "foreign True True" in out, out[-4000:]
