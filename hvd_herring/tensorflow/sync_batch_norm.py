"""SyncBatchNormalization for Keras 3: batch statistics computed over every rank's batch.

Horovod's version overrides a Keras 2 method that Keras 3 no longer calls (it would silently
normalize with local statistics); this one overrides Keras 3's `_moments`. Each rank contributes
its element count, sum and sum of squares, so ranks with different batch sizes are weighted
correctly."""

import keras
import tensorflow as tf

from hvd_herring.tensorflow import mpi_ops


class SyncBatchNormalization(keras.layers.BatchNormalization):
    """Batch normalization whose training statistics are synchronized across all ranks."""

    def __init__(self, **kwargs):
        if kwargs.pop("fused", None):
            raise ValueError("SyncBatchNormalization does not support fused=True.")
        kwargs.setdefault("name", "sync_batch_normalization")
        super().__init__(**kwargs)

    def _moments(self, inputs, mask):
        mean, variance = super()._moments(inputs, mask)
        if mpi_ops.size() == 1:
            return mean, variance
        if mask is None:
            count = tf.cast(tf.size(inputs), inputs.dtype) / tf.cast(tf.size(mean), inputs.dtype)
        else:
            count = tf.reduce_sum(tf.cast(mask, inputs.dtype))
        stats = tf.stack([mean * count, (variance + tf.square(mean)) * count])
        summed, total = mpi_ops._grouped_allreduce([stats, tf.reshape(count, [1])], op=mpi_ops.Sum)
        global_mean = summed[0] / total[0]
        global_variance = summed[1] / total[0] - tf.square(global_mean)
        return global_mean, global_variance
