"""Horovod's Spark estimators on a Spark DataFrame (tests/cluster_engines/applications/workers/spark_driver.py's `torch_estimator`
and `keras_estimator` scenarios): a linear regression, y = X w + b without noise, fitted by
horovod.spark.torch.TorchEstimator / horovod.spark.keras.KerasEstimator on 2 ranks, and the fitted
model's transform() of the same DataFrame. The test compares the weights with the float64
least-squares solution and the predictions with y."""

import numpy as np

FEATURES, ROWS = 3, 512
TRUE_W, TRUE_B = [2.0, -3.0, 0.5], 1.0


def _data():
    x = np.random.default_rng(7).uniform(-1, 1, size=(ROWS, FEATURES))
    return x, x @ np.array(TRUE_W) + TRUE_B


def dataframe(spark):
    """Features as an array column: Horovod's TorchModel.transform() turns a DenseVector into a
    float64 tensor that a float32 model refuses (its code, under any backend)."""
    x, y = _data()
    return spark.createDataFrame([(row.tolist(), float(t)) for row, t in zip(x, y)], ["features", "y"])


def least_squares():
    """The float64 reference: what every converged fit must find (the data has no noise)."""
    x, y = _data()
    solution, *_ = np.linalg.lstsq(np.hstack([x, np.ones((ROWS, 1))]), y, rcond=None)
    return solution.tolist()


def _predictions(model, df, output_col):
    rows = model.transform(df).select("y", output_col).collect()
    return [(float(r["y"]), float(np.ravel(r[output_col])[0])) for r in rows]


def torch_estimator(spark, store_dir, num_proc):
    import torch
    from horovod.spark.common.store import LocalStore
    from horovod.spark.torch import TorchEstimator
    torch.manual_seed(0)
    net = torch.nn.Linear(FEATURES, 1)
    estimator = TorchEstimator(num_proc=num_proc, store=LocalStore(store_dir), model=net,
                               optimizer=torch.optim.SGD(net.parameters(), lr=0.2),
                               loss=lambda output, label: torch.nn.functional.mse_loss(output, label),
                               input_shapes=[[-1, FEATURES]], feature_cols=["features"], label_cols=["y"],
                               batch_size=32, epochs=40, verbose=1, shuffle=True)
    df = dataframe(spark)
    fitted = estimator.fit(df).setOutputCols(["y_pred"])
    trained = fitted.getModel()
    weights = trained.weight.detach().flatten().tolist() + trained.bias.detach().flatten().tolist()
    return {"weights": weights, "predictions": _predictions(fitted, df, "y_pred"),
            "module": type(estimator).__module__, "history": fitted.getHistory()}


def _keras_estimator(store_dir, num_proc):
    import tensorflow as tf
    from horovod.spark.common.store import LocalStore
    from horovod.spark.keras import KerasEstimator
    keras = tf.keras
    tf.random.set_seed(0)
    inputs = keras.Input(shape=(FEATURES,), name="features")
    net = keras.Model(inputs, keras.layers.Dense(1)(inputs))
    return KerasEstimator(num_proc=num_proc, store=LocalStore(store_dir), model=net,
                          optimizer=keras.optimizers.SGD(learning_rate=0.2), loss="mse",
                          feature_cols=["features"], label_cols=["y"], batch_size=32, epochs=40,
                          verbose=0, shuffle=True)


def _keras_result(fitted, estimator, df):
    kernel, bias = fitted.getModel().get_weights()
    return {"weights": np.ravel(kernel).tolist() + np.ravel(bias).tolist(),
            "predictions": _predictions(fitted, df, "y_pred"), "module": type(estimator).__module__,
            "history": fitted.getHistory(), "keras": type(fitted.getModel()).__module__.split(".")[0],
            "learning_rate": float(np.asarray(fitted.getModel().optimizer.learning_rate))}


def keras_estimator(spark, store_dir, num_proc):
    estimator = _keras_estimator(store_dir, num_proc)
    df = dataframe(spark)
    return _keras_result(estimator.fit(df).setOutputCols(["y_pred"]), estimator, df)


def keras_estimator_saved(spark, store_dir, num_proc):
    """What a pipeline that persists its stages does: the estimator saved and loaded before fit()
    (the model and optimizer parameters through TFKerasUtil's serializers), the fitted KerasModel
    saved and loaded before transform()."""
    import os
    from horovod.spark.common.store import LocalStore
    from horovod.spark.keras import KerasEstimator, KerasModel
    estimator_path, model_path = os.path.join(store_dir, "estimator"), os.path.join(store_dir, "model")
    for path in (estimator_path, model_path):   # the store writes the metadata file into them
        os.makedirs(path)
    _keras_estimator(store_dir, num_proc).save(estimator_path)
    estimator = KerasEstimator.load(estimator_path)
    estimator.setStore(LocalStore(store_dir))   # stores are not saved (Horovod's writer)
    df = dataframe(spark)
    estimator.fit(df).save(model_path)
    return _keras_result(KerasModel.load(model_path).setOutputCols(["y_pred"]), estimator, df)
