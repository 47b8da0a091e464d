"""Under the switch, Horovod's estimators default to PetastormDataModule; when Petastorm does not
import (its last release needs pyarrow < 16), the name answers with our pyarrow data module, so
estimators built without data_module= train, and one that passes PetastormDataModule explicitly does
too. With a working Petastorm installed, Horovod's own module stays."""

import functools
import importlib


@functools.lru_cache(maxsize=None)   # a failed import is attempted anew each time: ask once
def _petastorm_imports():
    try:
        importlib.import_module("petastorm")
        return True
    except Exception:  # noqa: BLE001 - ImportError, or pyarrow's AttributeError inside petastorm
        return False


def torch_default(datamodule_module):
    if not _petastorm_imports():
        from hvd_herring.spark.torch_data import ParquetDataModule
        datamodule_module.PetastormDataModule = ParquetDataModule


def keras_default(datamodule_module):
    if not _petastorm_imports():
        from hvd_herring.spark.keras_data import ParquetDataModule
        datamodule_module.PetastormDataModule = ParquetDataModule


def keras_dataset(util_module):
    if not _petastorm_imports():
        from hvd_herring.spark.keras_data import make_dataset_fn
        util_module.TFKerasUtil.make_dataset_fn = staticmethod(make_dataset_fn)
