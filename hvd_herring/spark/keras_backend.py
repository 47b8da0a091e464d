"""Horovod's Spark Keras optimizer serialization (horovod.spark.keras.tensorflow) under Keras 2.

It imports `from keras import backend, optimizers`, written when the `keras` package was Keras 2.
Beside TensorFlow 2.16+ that package is Keras 3 even when tf.keras is Keras 2 (tf_keras,
TF_USE_LEGACY_KERAS=1), and Keras 3's backend has no batch_get_value: saving a KerasEstimator
fails. Under the switch the module uses the backend and optimizers of the Keras tf.keras is.

Its loader reads h5py 2's API (attributes as bytes, Dataset.value), so loading a saved
KerasEstimator fails with h5py 3; under the switch load_tf_keras_optimizer reads either. (Under
Keras 3 the estimator's optimizers do not go through this module: keras3_serialization.)"""

import json

import tensorflow as tf

from hvd_herring.tensorflow.keras_flavour import is_keras2


def _text(value):
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def load_tf_keras_optimizer(h5py_file, custom_objects=None, model=None):
    """The optimizer save_tf_keras_optimizer wrote, with its variables' values when it saved any
    (then `model` is needed to build it)."""
    config = json.loads(_text(h5py_file.attrs["training_config"]))["optimizer_config"]
    optimizer = tf.keras.optimizers.deserialize(config, custom_objects=custom_objects or {})
    if "optimizer_weights" in h5py_file:
        group = h5py_file["optimizer_weights"]
        values = [group[_text(name)][()] for name in group.attrs["weight_names"]]
        if values:
            if hasattr(optimizer, "build"):
                optimizer.build(model.trainable_weights)
            optimizer.set_weights(values)
    return optimizer


def use_tf_keras(module):
    if is_keras2():
        module.K = tf.keras.backend
        module.optimizers = tf.keras.optimizers
        module.load_tf_keras_optimizer = load_tf_keras_optimizer
