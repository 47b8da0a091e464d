"""TorchEstimator's data module without Petastorm: each rank's share of the prepared Parquet data
as dicts of column -> torch tensor, endless (Horovod's trainer takes steps_per_epoch batches per
epoch, so ranks with unequal shares still take equal steps), as PetastormDataModule gives them."""

import torch

from hvd_herring.spark.data_module import ParquetDataModuleBase


def _as_tensors(batches):
    for batch in batches:
        yield {name: torch.as_tensor(values) for name, values in batch.items()}


class ParquetDataModule(ParquetDataModuleBase):
    def train_data(self):
        return _as_tensors(self.shard(self.train_dir, self.train_batch_size, self.shuffle))

    def val_data(self):
        return _as_tensors(self.shard(self.val_dir, self.val_batch_size, False)) if self.has_val else None
