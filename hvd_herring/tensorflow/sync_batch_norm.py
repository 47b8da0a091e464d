"""SyncBatchNormalization: batch statistics computed over every rank's batch, as a subclass of the
BatchNormalization of the Keras tf.keras is.

Each rank contributes its element count, sum and sum of squares (one allreduce), so ranks with
different batch sizes are weighted correctly. The flavours differ only in the method that computes
a batch's moments: Keras 3's `_moments(inputs, mask)`; Keras 2's `_moments(inputs,
reduction_axes, keep_dims, mask)`, which Horovod overrides too (it is never called by the fused
kernel, hence fused=False)."""

import tensorflow as tf

from hvd_herring.tensorflow import mpi_ops
from hvd_herring.tensorflow.keras_flavour import is_keras2


def _global_moments(inputs, mask, mean, variance):
    """This rank's (mean, variance) over its batch -> the ones over every rank's batch."""
    if mpi_ops.size() == 1:
        return mean, variance
    if mask is None:
        count = tf.cast(tf.size(inputs), mean.dtype) / tf.cast(tf.size(mean), mean.dtype)
    else:
        count = tf.reduce_sum(tf.cast(mask, mean.dtype))
    stats = tf.stack([mean * count, (variance + tf.square(mean)) * count])
    summed, total = mpi_ops._grouped_allreduce([stats, tf.reshape(count, [1])], op=mpi_ops.Sum)
    global_mean = summed[0] / total[0]
    global_variance = summed[1] / total[0] - tf.square(global_mean)
    return global_mean, global_variance


def _check_not_fused(kwargs):
    if kwargs.pop("fused", None):
        raise ValueError("SyncBatchNormalization does not support fused=True.")
    if not kwargs.get("name"):
        kwargs["name"] = "sync_batch_normalization"


if is_keras2():
    class SyncBatchNormalization(tf.keras.layers.BatchNormalization):
        """Batch normalization whose training statistics are synchronized across all ranks."""

        def __init__(self, **kwargs):
            _check_not_fused(kwargs)
            super().__init__(fused=False, **kwargs)

        def _moments(self, inputs, reduction_axes, keep_dims, mask=None):
            mean, variance = super()._moments(inputs, reduction_axes, keep_dims, mask=mask)
            return _global_moments(inputs, mask, mean, variance)
else:
    class SyncBatchNormalization(tf.keras.layers.BatchNormalization):
        """Batch normalization whose training statistics are synchronized across all ranks."""

        def __init__(self, **kwargs):
            _check_not_fused(kwargs)
            super().__init__(**kwargs)

        def _moments(self, inputs, mask):
            mean, variance = super()._moments(inputs, mask)
            return _global_moments(inputs, mask, mean, variance)
