"""Horovod's KerasEstimator and KerasModel under Keras 3.

Horovod 0.28.1 wrote them for Keras 2: model shapes from `shape.as_list()`, the optimizer's
`variables()` and `lr`, HDF5 model files. Under the switch with Keras 3 as tf.keras, the methods
that use those are replaced by the ones here; everything else (parameters, data preparation, the
Spark backend, the Params writer and reader) stays Horovod's. With Keras 2 (tf_keras) nothing
changes. The trainer is keras3_trainer's; models travel as `.keras` bytes (keras3_serialization)."""

import os

import numpy as np

from hvd_herring.spark import keras3_serialization as serialization
# (output_names is not used here; tests import it from this module)
from hvd_herring.spark.keras3_model import model_shapes, output_names, scale_learning_rate  # noqa: F401
from hvd_herring.spark.keras3_trainer import RemoteTrainer


def get_model_shapes(self):
    return model_shapes(self.getModel())


def _compile_model(self, keras_utils):
    """The model compiled with the estimator's loss and metrics and a DistributedOptimizer of its
    optimizer (carrying over that optimizer's state when it has any), serialized."""
    model = self.getModel()
    if not self.getLoss():
        raise ValueError('Loss parameter is required for the model to compile')
    optimizer = self.getOptimizer() or getattr(model, "optimizer", None)
    if not optimizer:
        raise ValueError('Optimizer must be provided either as a parameter or as part of a compiled model')
    hvd = keras_utils.get_horovod()
    compression = self.getGradientCompression()
    distributed = hvd.DistributedOptimizer(optimizer, **({"compression": compression} if compression else {}))
    model.compile(optimizer=distributed, loss=self.getLoss(), loss_weights=self.getLossWeights(),
                  metrics=self.getMetrics())
    if getattr(optimizer, "built", False):
        distributed.build(model.trainable_variables)
        distributed.set_weights([np.asarray(v) for v in optimizer.variables])
    return serialization.serialize_model(model)


def _load_model_from_checkpoint(self, run_id):
    """The run's last checkpoint as a serialized model (the file's bytes are one), or None."""
    store = self.getStore()
    path = serialization.checkpoint_path(os.path.join(store.get_checkpoint_path(run_id),
                                                      store.get_checkpoint_filename()))
    if not store.fs.exists(path):
        return None
    if self.getVerbose():
        print(f'Resuming training from last checkpoint: {path}')
    return serialization.read_model_file(path, opener=store.fs.open)


def _fit_on_prepared_data(self, backend, train_rows, val_rows, metadata, avg_row_size, dataset_idx=None):
    """Horovod's, except that a run id whose checkpoint directory holds no model file yet trains
    from the estimator's model (Horovod's would hand the ranks None)."""
    import time
    self._check_params(metadata)
    keras_utils = self._get_keras_utils()
    run_id = self.getRunId() or f'keras_{int(time.time())}'
    serialized_model = self._has_checkpoint(run_id) and self._load_model_from_checkpoint(run_id)
    if not serialized_model:
        serialized_model = self._compile_model(keras_utils)
    trainer = RemoteTrainer(self, metadata, keras_utils, run_id, dataset_idx)
    handle = backend.run(trainer, args=(serialized_model, train_rows, val_rows, avg_row_size), env=self.getBackendEnv())
    return self._create_model(handle, run_id, metadata)


def _create_model(self, run_results, run_id, metadata):
    """The fitted KerasModel, its optimizer's learning rate scaled back from the number of ranks
    (the trainer scaled it up), so that fitting it again starts from the user's rate."""
    keras = self._get_keras_utils().keras()
    history, serialized_model, size = run_results[0]
    model = serialization.deserialize_model(serialized_model, serialization.keras_loader(keras, self.getCustomObjects()))
    scale_learning_rate(model.optimizer, 1.0 / size)
    return self.get_model_class()(**self._get_model_kwargs(model, history, run_id, metadata, keras.backend.floatx()))


def _output_value(prediction, meta):
    """One row's prediction for a label column, in that column's Spark type (Horovod's mapping)."""
    import numbers
    from pyspark.ml.linalg import DenseVector, SparseVector
    from horovod.spark.common import util
    flat = np.asarray(prediction).reshape(-1)
    col_type = meta['spark_data_type']
    if col_type == DenseVector:
        return DenseVector(flat)
    if col_type == SparseVector:
        nonzero = flat.nonzero()[0]
        return SparseVector(meta['shape'], nonzero, flat[nonzero])
    python_type = util.spark_scalar_to_python_type(col_type)
    value = flat[0]
    return python_type(round(value) if issubclass(python_type, numbers.Integral) else value)


def _transform(self, df):
    """Predictions for every row of df in the output columns, a partition at a time (a batch per
    partition, where Horovod's predicts row by row)."""
    from pyspark.sql import SparkSession
    from horovod.spark.common import util
    from horovod.spark.keras import remote as horovod_remote
    keras_utils = self._get_keras_utils()
    floatx, custom_objects, metadata = self._get_floatx(), self.getCustomObjects(), self._get_metadata()
    serialized_model = serialization.serialize_model(self.getModel())
    label_cols, output_cols, feature_cols = self.getLabelColumns(), self.getOutputCols(), self.getFeatureColumns()
    pin_cpu = horovod_remote._pin_cpu_fn()
    output_schema = util.get_spark_df_output_schema(df.schema, label_cols, output_cols, metadata)
    output_names = [field.name for field in output_schema.fields]

    def predict(rows):
        import tensorflow as tf
        from pyspark import Row
        keras = keras_utils.keras()
        keras.backend.set_floatx(floatx)
        pin_cpu(tf, keras)   # no GPU, one thread per task
        model = serialization.deserialize_model(serialized_model, serialization.keras_loader(keras, custom_objects))
        input_shapes, _ = model_shapes(model)
        rows = list(rows)
        if not rows:
            return
        inputs = [np.stack([np.asarray(r[col].toArray() if hasattr(r[col], "toArray") else r[col]) for r in rows])
                  .reshape([len(rows)] + shape[1:]) for col, shape in zip(feature_cols, input_shapes)]
        outputs = model.predict_on_batch(inputs)
        outputs = [np.asarray(o) for o in (outputs if isinstance(outputs, (list, tuple)) else [outputs])]
        for i, row in enumerate(rows):
            fields = row.asDict()
            for label_col, output_col, output in zip(label_cols, output_cols, outputs):
                fields[output_col] = _output_value(output[i], metadata[label_col])
            yield Row(*(fields[name] for name in output_names))

    return SparkSession._instantiatedSession.createDataFrame(df.rdd.mapPartitions(predict), schema=output_schema)


def adapt(estimator_module):
    """Under Keras 3, KerasEstimator and KerasModel use the methods above."""
    from hvd_herring.tensorflow.keras_flavour import is_keras2
    if is_keras2():
        return
    estimator = estimator_module.KerasEstimator
    for method in (get_model_shapes, _compile_model, _load_model_from_checkpoint, _fit_on_prepared_data,
                   _create_model):
        setattr(estimator, method.__name__, method)
    estimator_module.KerasModel._transform = _transform
