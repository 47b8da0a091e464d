"""Horovod's Spark estimators (horovod.spark.torch.TorchEstimator, horovod.spark.keras.KerasEstimator)
on current pyarrow, without Petastorm: Horovod's own estimator code runs unchanged; under the switch
its parquet-dataset calls see the pyarrow API they were written for (parquet_dataset.py) and, when
Petastorm does not import, its default data module reads the prepared Parquet data with pyarrow
(parquet_shards.py, torch_data.py, keras_data.py)."""
