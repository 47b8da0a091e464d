"""Horovod's Spark Keras optimizer serialization (horovod.spark.keras.tensorflow) imports
`from keras import backend, optimizers`, written when the `keras` package was Keras 2. Beside
TensorFlow 2.16+ that package is Keras 3 even when tf.keras is Keras 2 (tf_keras,
TF_USE_LEGACY_KERAS=1), and Keras 3's backend has no batch_get_value: saving a KerasEstimator
fails. Under the switch the module uses the backend and optimizers of the Keras tf.keras is."""

import tensorflow as tf

from hvd_herring.tensorflow.keras_flavour import is_keras2


def use_tf_keras(module):
    if is_keras2():
        module.K = tf.keras.backend
        module.optimizers = tf.keras.optimizers
