"""Which Keras `tf.keras` is, decided once per process.

TensorFlow 2.16+ gives Keras 3 as tf.keras; with TF_USE_LEGACY_KERAS=1 (and tf_keras installed)
tf.keras is Keras 2, which is what Horovod's Keras layer and most existing Horovod scripts were
written for. Both are first-class here: hvd_herring.tensorflow.keras.keras2 and .keras3 hold what
differs between them (the optimizer hook, the callback base class, saving and loading), everything
else is written once. Layers and optimizers always come from the flavour tf.keras names, so a
script's `tf.keras.optimizers.SGD` and our classes agree.
"""

import functools
import importlib

import tensorflow as tf


@functools.lru_cache(maxsize=None)
def is_keras2():
    """True when tf.keras is Keras 2 (tf_keras, or the keras 2.x package of an older TensorFlow)."""
    # The package tf.keras's classes come from (tf.keras itself may be a lazy loader or an alias
    # module named tensorflow.keras, depending on how it was first imported).
    package = tf.keras.layers.Layer.__module__.split(".")[0]
    if package == "tf_keras":
        return True
    version = getattr(importlib.import_module(package), "__version__", "3")
    return str(version).startswith("2.")


def flavour():
    """The module implementing the Keras-specific parts for the Keras tf.keras is."""
    name = "keras2" if is_keras2() else "keras3"
    return importlib.import_module(f"hvd_herring.tensorflow.keras.{name}")


def optimizer_variables(optimizer):
    """An optimizer's variables as a list, whichever spelling it has (Keras 3 and tf_keras's
    current optimizers: a list attribute; tf_keras's legacy optimizers: a method)."""
    variables = optimizer.variables
    return list(variables if isinstance(variables, list) else variables())
