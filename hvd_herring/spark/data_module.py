"""What the torch and Keras data modules that stand in for PetastormDataModule share: Horovod's
DataModule arguments, the refusal of a Petastorm transform, and this rank's ParquetShard."""

from horovod.spark.common.datamodule import DataModule

from hvd_herring.spark.parquet_shards import ParquetShard, refuse_petastorm_transform


class ParquetDataModuleBase(DataModule):
    short_name = "parquet"

    def __init__(self, random_seed=0, **kwargs):
        super().__init__(**kwargs)
        refuse_petastorm_transform(self.transform_fn)
        self.random_seed = random_seed

    def shard(self, path, batch_size, shuffle):
        """This rank's share of the dataset at `path`, in endless batches."""
        return ParquetShard(path, self.cur_shard, self.shard_count, columns=self.schema_fields,
                            batch_size=batch_size, shuffle=shuffle, seed=self.random_seed,
                            storage_options=self.storage_options)
