"""The TensorFlow examples' model and data (keras_train.py, tensorflow2_train.py): a small CNN and
synthetic images, so both examples train the same thing through their two APIs."""

import numpy as np
import tensorflow as tf


def make_model():
    return tf.keras.Sequential([
        tf.keras.Input((28, 28, 1)),
        tf.keras.layers.Conv2D(16, 3, activation="relu"),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Conv2D(32, 3, activation="relu"),
        tf.keras.layers.MaxPooling2D(),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(64, activation="relu"),
        tf.keras.layers.Dense(10),
    ])


def synthetic_dataset(samples, seed=1234):
    """The same data on every rank: noisy copies of ten prototype images, labelled by prototype."""
    g = np.random.default_rng(seed)
    prototypes = g.standard_normal((10, 28, 28, 1)).astype(np.float32)
    y = g.integers(0, 10, samples).astype(np.int32)
    x = prototypes[y] + 2.0 * g.standard_normal((samples, 28, 28, 1)).astype(np.float32)
    return x, y
