"""Horovod's Keras API (horovod.tensorflow.keras and horovod.keras) for Keras 3 on the herring
engine. With TensorFlow 2.21, tf.keras IS Keras 3, so both Horovod packages are this one.

    import horovod.tensorflow.keras as hvd
    hvd.init()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.Adam(0.001 * hvd.size())), ...)
    model.fit(x, y, callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                               hvd.callbacks.MetricAverageCallback()])
"""

import sys

import horovod
import keras
import tensorflow as tf

from horovod.tensorflow.compression import Compression  # noqa: F401

from hvd_herring.tensorflow import (  # noqa: F401
    init, shutdown, is_initialized, start_timeline, stop_timeline,
    size, local_size, cross_size, rank, local_rank, cross_rank, is_homogeneous,
    mpi_threads_supported, mpi_enabled, mpi_built, gloo_enabled, gloo_built,
    nccl_built, ddl_built, ccl_built, cuda_built, rocm_built,
    ProcessSet, global_process_set, add_process_set, remove_process_set,
    Average, Sum, Adasum)
from hvd_herring.tensorflow import collectives as _collectives
from hvd_herring.tensorflow import mpi_ops as _mpi_ops
from hvd_herring.tensorflow.keras import callbacks  # noqa: F401
from hvd_herring.tensorflow.keras.optimizer import DistributedOptimizer, distributed_class_for

for _alias in ("horovod.tensorflow.keras", "horovod.keras"):
    sys.modules[_alias] = sys.modules[__name__]
    sys.modules[_alias + ".callbacks"] = callbacks
horovod.keras = sys.modules[__name__]


def broadcast_global_variables(root_rank):
    """Keras 2 broadcast every variable of the session's graph; Keras 3 has no global variables.
    Raises with what to use instead."""
    raise NotImplementedError(
        "Keras 3 has no global variables: use hvd.callbacks.BroadcastGlobalVariablesCallback(root_rank) in "
        "model.fit, or horovod.tensorflow.broadcast_variables(model.variables, root_rank)")


def allreduce(value, name=None, average=None, prescale_factor=1.0, postscale_factor=1.0, op=None,
              compression=Compression.none):
    """Allreduce (Average by default) of a tensor-compatible value; returns a tensor."""
    return _collectives.allreduce(tf.constant(value), average=average, prescale_factor=prescale_factor,
                                  postscale_factor=postscale_factor, op=op, compression=compression, name=name)


def allgather(value, name=None):
    """Concatenation of a tensor-compatible value from every rank along the first dimension."""
    return _mpi_ops.allgather(tf.constant(value), name=name)


def broadcast(value, root_rank, name=None):
    """The root rank's value of a tensor-compatible value."""
    return _mpi_ops.broadcast(tf.constant(value), root_rank, name=name)


def reducescatter(value, name=None, op=Average):
    """Reduction of a tensor-compatible value, scattered along the first dimension."""
    return _collectives.reducescatter(tf.constant(value), op=op, name=name)


def load_model(filepath, custom_optimizers=None, custom_objects=None, compression=Compression.none,
               legacy_opts=False):
    """Loads a saved Keras model whose optimizer becomes a DistributedOptimizer (with
    `compression`), keeping the optimizer's saved state. Every keras.optimizers optimizer is
    recognised, and the classes in `custom_optimizers`."""
    if legacy_opts:
        raise ValueError("Keras 3 has no legacy optimizers (legacy_opts=True)")
    classes = [c for c in keras.optimizers.Optimizer.__subclasses__()]
    classes += list(custom_optimizers or [])
    objects = {c.__name__: distributed_class_for(c) for c in classes if not c.__name__.startswith("_")}
    objects.update(custom_objects or {})
    model = keras.models.load_model(filepath, custom_objects=objects)
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None and hasattr(optimizer, "_hvd_settings"):
        from hvd_herring.tensorflow.gradient_reduction import GradientAllreducer
        from hvd_herring.tensorflow.keras.optimizer import _Settings
        optimizer._hvd = _Settings(GradientAllreducer(f"Distributed{type(optimizer).__name__}",
                                                      compression=compression))
    return model
