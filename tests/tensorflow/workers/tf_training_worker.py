"""Runs inside every rank: trains a Keras model with a GradientTape loop and
hvd.DistributedGradientTape (traced with tf.function, eagerly, with groups=, with num_groups),
starting from different weights on every rank fixed by hvd.broadcast_variables, and compares the
weights with a single-process reference trained on the concatenation of every rank's batches.
Also records engine counters at steady state (a traced step reuses its collective names, so
negotiation is served by the response cache).

Writes $HERRING_TEST_RESULTS/<rank>.json."""

import sys

import keras
import numpy as np
import tensorflow as tf

import horovod.tensorflow as hvd
import api_checks
from checks import write_report

STEPS = 12
BATCH = 8
FEATURES = 20
CLASSES = 4


def initial_weights(seed):
    """The model's weights for `seed` (the model is built once per use, from these)."""
    g = np.random.default_rng(seed)
    shapes = [(FEATURES, 32), (32,), (32, 32), (32,), (32, CLASSES), (CLASSES,)]
    return [(g.standard_normal(s) * 0.3).astype(np.float32) for s in shapes]


def make_model(seed):
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(32, activation="tanh"),
                              keras.layers.Dense(32, activation="tanh"), keras.layers.Dense(CLASSES)])
    model.set_weights(initial_weights(seed))
    return model


def batch(rank, step):
    g = np.random.default_rng(10_000 * step + rank)
    return (g.standard_normal((BATCH, FEATURES)).astype(np.float32),
            g.integers(0, CLASSES, BATCH).astype(np.int32))


LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def fence():
    """A collective with a fixed name (see training_worker.py): counter snapshots between two
    fences see the same steps on every rank."""
    hvd.allreduce(tf.zeros(1), name="fence")


def train_distributed(variant):
    model = make_model(100 + hvd.rank())  # different on purpose: the broadcast must fix it
    optimizer = keras.optimizers.SGD(0.1, momentum=0.9)
    hvd.broadcast_variables(model.variables, root_rank=0)
    variables = model.trainable_variables
    kwargs = {}
    if variant == "groups":
        kwargs["groups"] = [variables[:2], variables[2:4]]  # the last layer forms groups of one
    elif variant == "num_groups":
        kwargs["num_groups"] = 2

    def step(x, y):
        with tf.GradientTape() as tape:
            loss = LOSS(y, model(x, training=True))
        tape = hvd.DistributedGradientTape(tape, **kwargs)
        grads = tape.gradient(loss, variables)
        optimizer.apply_gradients(zip(grads, variables))
        return loss

    if variant != "eager":
        step = tf.function(step)

    def run_step(s):
        x, y = batch(hvd.rank(), s)
        step(tf.constant(x), tf.constant(y))

    return model, api_checks.train_with_counter_snapshots(STEPS, fence, run_step)


def train_reference():
    """One process, one model, every rank's batch at once: what data parallelism must equal."""
    model = make_model(100)  # rank 0's initial weights
    optimizer = keras.optimizers.SGD(0.1, momentum=0.9)
    for s in range(STEPS):
        xs, ys = zip(*[batch(r, s) for r in range(hvd.size())])
        with tf.GradientTape() as tape:
            loss = LOSS(np.concatenate(ys), model(np.concatenate(xs), training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return model


def main():
    hvd.init()
    reference = train_reference()
    results = {}
    for variant in ("function", "eager", "groups", "num_groups"):
        model, counters = train_distributed(variant)
        diffs = [float(np.abs(a - b).max()) for a, b in zip(model.get_weights(), reference.get_weights())]
        flat = np.concatenate([w.ravel() for w in model.get_weights()])
        everyone = hvd.allgather(tf.constant(flat[None, :]), name=f"weights.{variant}").numpy()
        identical = all(np.array_equal(everyone[0], everyone[r]) for r in range(hvd.size()))
        results[variant] = {"max_diff": max(diffs), "identical": identical, "counters": counters}
        print(f"rank {hvd.rank()}: {variant}: max diff from the reference {max(diffs):.2e}, identical on every "
              f"rank: {identical}", file=sys.stderr, flush=True)
    write_report(hvd.rank(), {"results": results, "size": hvd.size()})
    hvd.shutdown()


if __name__ == "__main__":
    sys.exit(main())
