"""Runs inside every rank: a TensorFlow training loop (tf.function step with
DistributedGradientTape); the rank named by HERRING_TEST_VICTIM kills itself with SIGKILL at
step 5. The survivors must get a TensorFlow error naming the lost rank within the deadline; they
record what they saw in $HERRING_TEST_RESULTS/<rank>.json and exit non-zero.

As in fault_worker.py, SIGTERM from horovodrun is deferred while the survivors report."""

import os
import signal
import sys
import time

import keras
import numpy as np
import tensorflow as tf

import horovod.tensorflow as hvd
from checks import write_report

terminated = []
signal.signal(signal.SIGTERM, lambda *_: terminated.append(time.monotonic()))


def main():
    hvd.init()
    victim = int(os.environ["HERRING_TEST_VICTIM"])
    keras.utils.set_random_seed(hvd.rank())
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(256, activation="relu"),
                              keras.layers.Dense(10)])
    optimizer = keras.optimizers.SGD(0.01)
    hvd.broadcast_variables(model.variables, root_rank=0)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    outcome = {"rank": hvd.rank()}
    kill_no_earlier_than = None
    g = np.random.default_rng(hvd.rank())
    try:
        for s in range(10_000):
            if s == 5 and hvd.rank() == victim:
                os.kill(os.getpid(), signal.SIGKILL)
            if s == 4:
                # The victim dies after finishing step 4, which it cannot finish before every rank
                # has started it: time from here bounds the time from the kill from above. (A
                # survivor can still be in step 4 when the victim dies, so step 5 is too late.)
                kill_no_earlier_than = time.monotonic()
            x = g.standard_normal((32, 64)).astype(np.float32)
            y = g.integers(0, 10, 32).astype(np.int32)
            step(x, y).numpy()
        outcome["error"] = None
    except Exception as e:  # noqa: BLE001 - the point is to see what the user sees
        outcome["error"] = f"{type(e).__name__}: {e}"
        outcome["is_tf_error"] = isinstance(e, tf.errors.OpError)
        outcome["seconds_to_error"] = time.monotonic() - kill_no_earlier_than if kill_no_earlier_than else None
    write_report(hvd.rank(), outcome)
    sys.exit(1 if outcome["error"] else 0)


if __name__ == "__main__":
    main()
