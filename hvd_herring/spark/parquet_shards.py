"""One rank's share of a Parquet dataset, in batches: what Petastorm's make_batch_reader and
BatchedDataLoader give Horovod's estimators, read with pyarrow alone.

As in Petastorm, the unit of sharding is the row group: the dataset's row groups (its files in
name order, each file's groups in order) go round-robin to the shards, so every rank reads a
disjoint share and together they read all rows. Shuffling permutes the shard's rows anew for each
epoch, from a seed and the epoch, so a run is repeatable."""

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def _data_files(fs, root):
    # Spark writes part-*.parquet beside _SUCCESS and .crc files; Horovod's metadata is _-prefixed.
    names = fs.find(root) if fs.isdir(root) else [root]
    return sorted(p for p in names
                  if not any(part.startswith(("_", ".")) for part in p[len(root):].split("/") if part))


def _column_to_numpy(column):
    """A scalar column as a 1-d array; a list column (Horovod writes vectors as arrays) as 2-d."""
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if pa.types.is_list(column.type) or pa.types.is_large_list(column.type) or \
            pa.types.is_fixed_size_list(column.type):
        rows = len(column)
        values = column.flatten().to_numpy(zero_copy_only=False)
        return values.reshape(rows, -1) if rows else values.reshape(0, 0)
    return column.to_numpy(zero_copy_only=False)


class ParquetShard:
    """Batches (dicts of column name -> numpy array) of shard `cur_shard` of `shard_count`."""

    def __init__(self, path, cur_shard, shard_count, columns=None, batch_size=32, shuffle=False,
                 seed=0, num_epochs=None, storage_options=None):
        self.path, self.batch_size, self.shuffle = path, batch_size, shuffle
        # Horovod's random_seed defaults to None: a fresh seed, fixed for this reader's epochs.
        self.seed = seed if seed is not None else np.random.SeedSequence().entropy
        self.num_epochs = num_epochs
        self.columns = [getattr(c, "name", c) for c in columns] if columns else None
        self._fs, root = fsspec.core.url_to_fs(path, **(storage_options or {}))
        groups = []
        for name in _data_files(self._fs, root):
            with self._fs.open(name, "rb") as f:
                groups += [(name, g) for g in range(pq.ParquetFile(f).num_row_groups)]
        self.row_groups = groups[cur_shard::shard_count]
        if not self.row_groups:
            raise ValueError(f"rank {cur_shard}: the dataset {path} has {len(groups)} row groups, fewer than "
                             f"the {shard_count} ranks reading it, so rank {cur_shard} would get no data; "
                             f"write it with more partitions (the estimator's num_proc or the DataFrame's)")
        self._table = None

    def _read_shard(self):
        """The shard's rows, read once (Horovod's estimators read their share every epoch)."""
        if self._table is None:
            tables = []
            for name, group in self.row_groups:
                with self._fs.open(name, "rb") as f:
                    tables.append(pq.ParquetFile(f).read_row_group(group, columns=self.columns))
            self._table = pa.concat_tables(tables)
        return self._table

    def rows(self):
        return self._read_shard().num_rows

    def _epoch_order(self, epoch):
        n = self.rows()
        if not self.shuffle:
            return np.arange(n)
        return np.random.default_rng([self.seed, epoch]).permutation(n)

    def __iter__(self):
        """Batches across epochs (forever when num_epochs is None); a batch may span two epochs, as
        Petastorm's loader fills batches from a continuous row stream."""
        table = self._read_shard()
        columns = {name: _column_to_numpy(table.column(name)) for name in table.column_names}
        epoch, order = 0, np.empty(0, dtype=np.int64)   # rows of earlier epochs not yet batched
        while self.num_epochs is None or epoch < self.num_epochs:
            order = np.concatenate([order, self._epoch_order(epoch)])
            epoch += 1
            while len(order) >= self.batch_size:
                take, order = order[:self.batch_size], order[self.batch_size:]
                yield {name: values[take] for name, values in columns.items()}
        if len(order):
            yield {name: values[order] for name, values in columns.items()}


def refuse_petastorm_transform(transform_fn):
    """An estimator's transformation_fn is a Petastorm TransformSpec function: without Petastorm,
    training on the untransformed data would be silently wrong."""
    if transform_fn is not None:
        raise ValueError("the estimator's transformation_fn needs Petastorm's TransformSpec, and Petastorm "
                         "does not import here (its last release needs pyarrow < 16): transform the "
                         "DataFrame before fit() instead (docs/spark.md)")
