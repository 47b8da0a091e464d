"""Horovod's estimator data preparation (horovod.spark.common.util.prepare_data) reads the parquet
dataset Spark wrote through the legacy pyarrow.parquet.ParquetDataset API: `schema.to_arrow_schema()`
and `pieces[i].get_metadata()`. pyarrow 15 removed that API; the dataset of today has `schema` (an
arrow schema already) and `fragments`. The store hands Horovod's code a view with the old names over
the new dataset."""

import pyarrow.parquet as pq


class _ArrowSchema:
    """`schema.to_arrow_schema()` of the legacy dataset: here the schema already is one."""

    def __init__(self, schema):
        self._schema = schema

    def to_arrow_schema(self):
        return self._schema

    def __getattr__(self, name):
        return getattr(self._schema, name)


class _Piece:
    """A legacy dataset piece: one parquet file, whose footer get_metadata() returns."""

    def __init__(self, fragment):
        self._fragment = fragment
        self.path = fragment.path

    def get_metadata(self):
        return self._fragment.metadata


class LegacyParquetDatasetView:
    """The legacy ParquetDataset names Horovod 0.28.1 uses, over pyarrow's current ParquetDataset."""

    def __init__(self, dataset):
        self._dataset = dataset
        self.schema = _ArrowSchema(dataset.schema)
        self.pieces = [_Piece(f) for f in dataset.fragments]

    def __getattr__(self, name):
        return getattr(self._dataset, name)


def give_stores_the_legacy_view(store_module):
    """Applied to horovod.spark.common.store after it ran (hvd_herring/switch.py)."""
    store_class = store_module.AbstractFilesystemStore

    def get_parquet_dataset(self, path):
        return LegacyParquetDatasetView(pq.ParquetDataset(self.get_localized_path(path), filesystem=self.fs))

    get_parquet_dataset.__doc__ = store_class.get_parquet_dataset.__doc__
    store_class.get_parquet_dataset = get_parquet_dataset
