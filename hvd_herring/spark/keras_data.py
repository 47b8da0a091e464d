"""KerasEstimator's data without Petastorm.

Horovod's Keras trainer gets its tf.data pipeline from TFKerasUtil.make_dataset_fn, whose dataset
function starts from a Petastorm reader (make_petastorm_dataset). When Petastorm does not import,
the switch gives make_dataset_fn a dataset function that starts from our ParquetShard instead and
keeps the rest of Horovod's pipeline: Horovod's own reshape (sparse vectors) and prep (features
and labels to the model's input and label shapes) functions, batched, endless, prefetched."""

import collections

import tensorflow as tf

from hvd_herring.spark.data_module import ParquetDataModuleBase


def _tf_dataset(shard):
    """The shard's batches as a tf.data.Dataset of namedtuples (Petastorm's row type: Horovod's
    prep reads columns as attributes)."""
    first = next(iter(shard))
    Row = collections.namedtuple("Row", list(first))
    signature = Row(*(tf.TensorSpec((None,) + v.shape[1:], tf.as_dtype(v.dtype)) for v in first.values()))
    return tf.data.Dataset.from_generator(lambda: (Row(*b.values()) for b in shard), output_signature=signature)


def make_dataset_fn(feature_columns, label_columns, sample_weight_col, metadata, input_shapes,
                    label_shapes, output_names):
    """TFKerasUtil.make_dataset_fn for a ParquetShard in the reader's place."""
    from horovod.spark.keras.util import TFKerasUtil
    has_sparse_col = any(metadata[col]["is_sparse_vector_only"] for col in label_columns + feature_columns)
    reshape = TFKerasUtil._reshape_fn(sample_weight_col, feature_columns, label_columns, metadata)
    prep = TFKerasUtil._prep_data_fn(has_sparse_col, sample_weight_col, feature_columns, label_columns,
                                     input_shapes, label_shapes, output_names)

    def fn(shard, batch_size, is_batch_reader=True, shuffle=True, cache=False):
        # The shard already shuffles per epoch, repeats without end and batches.
        dataset = _tf_dataset(shard)
        if has_sparse_col:   # Horovod decodes its custom sparse format one row at a time
            dataset = dataset.unbatch().batch(1).map(reshape).batch(batch_size)
        return dataset.map(prep).prefetch(tf.data.AUTOTUNE)

    return tf.autograph.experimental.do_not_convert(fn)


class ParquetDataModule(ParquetDataModuleBase):
    def __init__(self, make_dataset=None, **kwargs):
        super().__init__(**kwargs)
        self.make_dataset = make_dataset

    def _data(self, path, batch_size, shuffle):
        return self.make_dataset(self.shard(path, batch_size, shuffle), batch_size, True, shuffle=shuffle,
                                 cache=self.inmemory_cache_all)

    def train_data(self):
        return self._data(self.train_dir, self.train_batch_size, self.shuffle)

    def val_data(self):
        return self._data(self.val_dir, self.val_batch_size, False) if self.has_val else None
