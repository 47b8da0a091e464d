"""Horovod's Keras API (horovod.tensorflow.keras and horovod.keras) on the herring engine, for the
Keras that tf.keras is: Keras 3 (TensorFlow 2.16+'s default) or Keras 2 (tf_keras, with
TF_USE_LEGACY_KERAS=1 set before TensorFlow is imported). Both Horovod packages are this one.

    import horovod.tensorflow.keras as hvd
    hvd.init()
    model.compile(optimizer=hvd.DistributedOptimizer(tf.keras.optimizers.Adam(0.001 * hvd.size())), ...)
    model.fit(x, y, callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                               hvd.callbacks.MetricAverageCallback()])

Layout: keras2.py and keras3.py hold what differs between the flavours (where the optimizer sees
gradients, the callback base class, saving); optimizer.py, callbacks.py and elastic.py are written
once on top of them. hvd_herring.tensorflow.keras_flavour decides which flavour applies.
"""

import sys

import horovod
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
from hvd_herring.tensorflow.keras_flavour import flavour as _flavour_module
from hvd_herring.tensorflow.keras import callbacks, elastic  # noqa: F401
from hvd_herring.tensorflow.keras.optimizer import (  # noqa: F401
    DistributedOptimizer, PartialDistributedOptimizer, distributed_class_for, load_model)

_flavour = _flavour_module()

for _alias in ("horovod.tensorflow.keras", "horovod.keras"):
    sys.modules[_alias] = sys.modules[__name__]
    sys.modules[_alias + ".callbacks"] = callbacks
    sys.modules[_alias + ".elastic"] = elastic
horovod.keras = sys.modules[__name__]


def broadcast_global_variables(root_rank):
    """Keras 2: broadcasts every global variable of Keras's session graph from root_rank (graph
    mode only, as in Horovod). Keras 3 has none: raises with what to use instead."""
    return _flavour.broadcast_global_variables(root_rank)


def allreduce(value, name=None, average=None, prescale_factor=1.0, postscale_factor=1.0, op=None,
              compression=Compression.none):
    """Allreduce (Average by default) of a tensor-compatible value; returns a tensor."""
    return _flavour.evaluate(_collectives.allreduce(
        tf.constant(value), average=average, prescale_factor=prescale_factor, postscale_factor=postscale_factor,
        op=op, compression=compression, name=name))


def allgather(value, name=None):
    """Concatenation of a tensor-compatible value from every rank along the first dimension."""
    return _flavour.evaluate(_mpi_ops.allgather(tf.constant(value), name=name))


def broadcast(value, root_rank, name=None):
    """The root rank's value of a tensor-compatible value."""
    return _flavour.evaluate(_mpi_ops.broadcast(tf.constant(value), root_rank, name=name))


def reducescatter(value, name=None, op=Average):
    """Reduction of a tensor-compatible value, scattered along the first dimension."""
    return _flavour.evaluate(_collectives.reducescatter(tf.constant(value), op=op, name=name))
