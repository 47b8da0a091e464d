"""Runs inside every rank: Keras 3 model.fit with `import horovod.tensorflow.keras as hvd`:
DistributedOptimizer + BroadcastGlobalVariablesCallback + MetricAverageCallback, every rank
starting from different random weights.

Variants: graph mode (the default), run_eagerly=True, backward_passes_per_step=2, and groups= with
fp16 compression and the learning-rate warm-up. Each records whether the final weights are
bitwise identical on every rank, their distance from a single-process reference fit on every
rank's data (where one exists), the epoch losses each rank computed on its own data (recorded by a
callback placed before MetricAverageCallback) and those the History kept (after averaging), and
the learning rates logged per epoch.

Writes $HERRING_TEST_RESULTS/<rank>.json."""

import sys

import keras
import numpy as np
import tensorflow as tf

import horovod.tensorflow as hvd_tf
import horovod.tensorflow.keras as hvd
from tf_harness import write_results

EPOCHS = 3
STEPS_PER_EPOCH = 6
BATCH = 8
FEATURES = 12
LR = 0.05


def data(rank):
    """This rank's shard: STEPS_PER_EPOCH batches of a learnable regression task."""
    g = np.random.default_rng(500 + rank)
    x = g.standard_normal((STEPS_PER_EPOCH * BATCH, FEATURES)).astype(np.float32)
    w = np.linspace(-1, 1, FEATURES * 2).reshape(FEATURES, 2).astype(np.float32)
    return x, np.tanh(x @ w) + 0.05 * g.standard_normal((len(x), 2)).astype(np.float32)


def make_model(seed):
    keras.utils.set_random_seed(seed)  # a different initialization on every rank
    return keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(16, activation="tanh"),
                             keras.layers.Dense(2)])


class RecordLocalLogs(keras.callbacks.Callback):
    """Keeps this rank's own epoch metrics, before MetricAverageCallback replaces them."""

    def __init__(self):
        super().__init__()
        self.losses = []

    def on_epoch_end(self, epoch, logs=None):
        self.losses.append(float(logs["loss"]))


def interleaved(n, micro_batches=1):
    """Every rank's data in the order the distributed steps consume it: reference batch k is the
    union of the ranks' batch k (of `micro_batches` local batches each)."""
    shards = [data(r) for r in range(n)]
    rows = BATCH * micro_batches
    xs, ys = [], []
    for k in range(STEPS_PER_EPOCH // micro_batches):
        for x, y in shards:
            xs.append(x[k * rows:(k + 1) * rows])
            ys.append(y[k * rows:(k + 1) * rows])
    return np.concatenate(xs), np.concatenate(ys), rows * n


def fit_reference(n, micro_batches=1):
    """One process, rank 0's initial weights, every rank's batch in one step."""
    model = make_model(1000)
    model.compile(optimizer=keras.optimizers.SGD(LR, momentum=0.9), loss="mse")
    x, y, batch = interleaved(n, micro_batches)
    model.fit(x, y, batch_size=batch, epochs=EPOCHS, shuffle=False, verbose=0)
    return model.get_weights()


def fit_distributed(variant):
    model = make_model(1000 + hvd.rank())
    kwargs = {}
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0)]
    if variant == "backward_passes_2":
        kwargs = {"backward_passes_per_step": 2, "average_aggregated_gradients": True}
    elif variant == "groups_fp16_warmup":
        kwargs = {"groups": [model.layers[0].trainable_weights], "compression": hvd.Compression.fp16}
        callbacks.append(hvd.callbacks.LearningRateWarmupCallback(initial_lr=LR, warmup_epochs=2))
    optimizer = hvd.DistributedOptimizer(keras.optimizers.SGD(LR, momentum=0.9), **kwargs)
    model.compile(optimizer=optimizer, loss="mse", run_eagerly=(variant == "eager"))
    local = RecordLocalLogs()
    callbacks += [local, hvd.callbacks.MetricAverageCallback()]
    x, y = data(hvd.rank())
    history = model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0, callbacks=callbacks)
    return model, local.losses, history.history


def main():
    hvd.init()
    n, rank = hvd.size(), hvd.rank()
    references = {"graph": fit_reference(n), "eager": None, "backward_passes_2": fit_reference(n, 2)}
    references["eager"] = references["graph"]
    results = {}
    for variant in ("graph", "eager", "backward_passes_2", "groups_fp16_warmup"):
        model, local_losses, history = fit_distributed(variant)
        weights = model.get_weights()
        flat = np.concatenate([w.ravel() for w in weights])
        everyone = hvd.allgather(tf.constant(flat[None, :]), name=f"weights.{variant}").numpy()
        reference = references.get(variant)
        results[variant] = {
            "identical": all(np.array_equal(everyone[0], everyone[r]) for r in range(n)),
            "max_diff": None if reference is None else max(float(np.abs(a - b).max())
                                                           for a, b in zip(weights, reference)),
            "local_losses": hvd_tf.allgather_object(local_losses, name=f"losses.{variant}"),
            "history_losses": [float(v) for v in history["loss"]],
            "lr": [float(v) for v in history.get("lr", [])],
            "iterations": int(model.optimizer.iterations.numpy()),
        }
        print(f"rank {rank}: {variant}: {results[variant]}", file=sys.stderr, flush=True)
    write_results(rank, {"results": results, "size": n, "steps_per_epoch": STEPS_PER_EPOCH, "lr": LR})
    hvd.shutdown()


if __name__ == "__main__":
    sys.exit(main())
