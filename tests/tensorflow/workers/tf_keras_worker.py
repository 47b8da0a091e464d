"""Runs inside every rank: Keras model.fit with `import horovod.tensorflow.keras as hvd`:
DistributedOptimizer + BroadcastGlobalVariablesCallback + MetricAverageCallback, every rank
starting from different random weights. Keras is whatever tf.keras is: Keras 3 by default, Keras 2
(tf_keras) when the launcher sets TF_USE_LEGACY_KERAS=1 (tests/tensorflow/test_tensorflow_keras2.py).

Variants (HERRING_KERAS_VARIANTS, comma-separated; DEFAULT_VARIANTS otherwise): graph mode,
run_eagerly=True, backward_passes_per_step=2, and groups= with fp16 compression and the
learning-rate warm-up; also legacy_optimizer (tf.keras.optimizers.legacy.SGD, Keras 2),
partial_local_layer (PartialDistributedOptimizer keeping the last layer local) and load_model
(trained, saved by rank 0, loaded with hvd.load_model on every rank, trained on). Each records
whether the final weights are bitwise identical on every rank, their distance from a
single-process reference fit on every rank's data (where one exists), the epoch losses each rank
computed on its own data (recorded by a callback placed before MetricAverageCallback) and those
the History kept (after averaging), and the learning rates logged per epoch.

Writes $HERRING_TEST_RESULTS/<rank>.json."""

import os
import sys

import numpy as np
import tensorflow as tf
from tensorflow import keras

import horovod.tensorflow as hvd_tf
import horovod.tensorflow.keras as hvd
from checks import write_report

DEFAULT_VARIANTS = ("graph", "eager", "backward_passes_2", "groups_fp16_warmup")
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


def flavour():
    return "keras2" if keras.layers.Layer.__module__.startswith("tf_keras") else "keras3"


def fit_distributed(variant, model=None, epochs=EPOCHS):
    model = model or make_model(1000 + hvd.rank())
    kwargs = {}
    callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(0)]
    sgd = keras.optimizers.SGD
    if variant == "backward_passes_2":
        kwargs = {"backward_passes_per_step": 2, "average_aggregated_gradients": True}
    elif variant == "groups_fp16_warmup":
        kwargs = {"groups": [model.layers[0].trainable_weights], "compression": hvd.Compression.fp16}
        callbacks.append(hvd.callbacks.LearningRateWarmupCallback(initial_lr=LR, warmup_epochs=2))
    elif variant == "legacy_optimizer":
        sgd = keras.optimizers.legacy.SGD
    if variant == "partial_local_layer":
        optimizer = hvd.PartialDistributedOptimizer(sgd(LR, momentum=0.9), local_layers=[model.layers[-1]])
    elif variant == "loaded":
        optimizer = model.optimizer  # as hvd.load_model restored it
    else:
        optimizer = hvd.DistributedOptimizer(sgd(LR, momentum=0.9), **kwargs)
    if variant != "loaded":
        model.compile(optimizer=optimizer, loss="mse", run_eagerly=(variant == "eager"))
    local = RecordLocalLogs()
    callbacks += [local, hvd.callbacks.MetricAverageCallback()]
    x, y = data(hvd.rank())
    history = model.fit(x, y, batch_size=BATCH, epochs=epochs, shuffle=False, verbose=0, callbacks=callbacks)
    return model, local.losses, history.history


def same_on_every_rank(weights, name):
    flat = np.concatenate([w.ravel() for w in weights])
    everyone = hvd.allgather(tf.constant(flat[None, :]), name=name).numpy()
    return all(np.array_equal(everyone[0], everyone[r]) for r in range(hvd.size()))


def save_and_load(model, variant):
    """Rank 0 saves the trained model; every rank loads it with hvd.load_model (fp16 compression)
    and trains on from there."""
    directory = os.environ["HERRING_TEST_RESULTS"]
    extension = {"load_model": ".keras", "load_model_h5": ".h5"}[variant]
    path = os.path.join(directory, f"model{extension}")
    if hvd.rank() == 0:
        model.save(path)
    hvd_tf.barrier()
    loaded = hvd.load_model(path, compression=hvd.Compression.fp16)
    optimizer = loaded.optimizer
    info = {
        "saved_iterations": int(model.optimizer.iterations.numpy()),
        "loaded_iterations": int(optimizer.iterations.numpy()),
        "distributed": hasattr(optimizer, "_hvd_settings") and optimizer._hvd_settings().reducer._compression
        is hvd.Compression.fp16,
        "class": f"{type(optimizer).__module__}.{type(optimizer).__name__}",
        "weights_restored": all(np.array_equal(a, b) for a, b in zip(model.get_weights(), loaded.get_weights())),
    }
    hvd_tf.barrier()
    return loaded, info


def main():
    hvd.init()
    n, rank = hvd.size(), hvd.rank()
    variants = [v for v in os.environ.get("HERRING_KERAS_VARIANTS", ",".join(DEFAULT_VARIANTS)).split(",") if v]
    references = {"graph": fit_reference(n)}
    references["eager"] = references["legacy_optimizer"] = references["graph"]
    if "backward_passes_2" in variants:
        references["backward_passes_2"] = fit_reference(n, 2)
    results = {}
    for variant in variants:
        extra = {}
        if variant.startswith("load_model"):
            trained, _, _ = fit_distributed("graph", epochs=1)
            model, extra = save_and_load(trained, variant)
            model, local_losses, history = fit_distributed("loaded", model=model, epochs=2)
        else:
            model, local_losses, history = fit_distributed(variant)
        weights = model.get_weights()
        if variant == "partial_local_layer":
            local_count = len(model.layers[-1].get_weights())
            extra = {"shared_identical": same_on_every_rank(weights[:-local_count], "shared.partial"),
                     "local_identical": same_on_every_rank(weights[-local_count:], "local.partial")}
        reference = references.get(variant)
        results[variant] = {
            "identical": same_on_every_rank(weights, f"weights.{variant}"),
            "max_diff": None if reference is None else max(float(np.abs(a - b).max())
                                                           for a, b in zip(weights, reference)),
            "local_losses": hvd_tf.allgather_object(local_losses, name=f"losses.{variant}"),
            "history_losses": [float(v) for v in history["loss"]],
            "lr": [float(v) for v in history.get("lr", [])],
            "iterations": int(model.optimizer.iterations.numpy()),
            **extra,
        }
        print(f"rank {rank}: {variant}: {results[variant]}", file=sys.stderr, flush=True)
    write_report(rank, {"results": results, "size": n, "steps_per_epoch": STEPS_PER_EPOCH, "lr": LR,
                        "flavour": flavour()})
    hvd.shutdown()


if __name__ == "__main__":
    sys.exit(main())
