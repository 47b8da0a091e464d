"""TorchEstimator's data module without Petastorm: each rank's share of the prepared Parquet data
as dicts of column -> torch tensor, endless (Horovod's trainer takes steps_per_epoch batches per
epoch, so ranks with unequal shares still take equal steps), as PetastormDataModule gives them."""

import torch

from horovod.spark.common.datamodule import DataModule

from hvd_herring.spark.parquet_shards import ParquetShard, refuse_petastorm_transform


def _as_tensors(batches):
    for batch in batches:
        yield {name: torch.as_tensor(values) for name, values in batch.items()}


class ParquetDataModule(DataModule):
    short_name = "parquet"

    def __init__(self, random_seed=0, **kwargs):
        super().__init__(**kwargs)
        refuse_petastorm_transform(self.transform_fn)
        self.random_seed = random_seed

    def _shard(self, path, batch_size, shuffle):
        return ParquetShard(path, self.cur_shard, self.shard_count, columns=self.schema_fields,
                            batch_size=batch_size, shuffle=shuffle, seed=self.random_seed,
                            storage_options=self.storage_options)

    def train_data(self):
        return _as_tensors(self._shard(self.train_dir, self.train_batch_size, self.shuffle))

    def val_data(self):
        return _as_tensors(self._shard(self.val_dir, self.val_batch_size, False)) if self.has_val else None
