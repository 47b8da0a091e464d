"""How KerasEstimator's models and optimizers travel under Keras 3 (hvd_herring/spark/keras3_*):
as `.keras` bytes and as a config with variable values, keeping what training built. In one
process; tests/cluster_engines/applications/test_spark.py fits the estimator itself on a Spark cluster."""

import numpy as np
import pytest

keras = pytest.importorskip("keras")
if not keras.__version__.startswith("3."):
    pytest.skip("Keras 3 is not installed", allow_module_level=True)

from hvd_herring.spark import keras3_serialization as serialization  # noqa: E402
from hvd_herring.spark.keras3_estimator import model_shapes, output_names  # noqa: E402


def _trained_model():
    """A model whose Adam optimizer has state (moments, iterations) after two steps."""
    keras.utils.set_random_seed(3)
    inputs = keras.Input(shape=(4,), name="x")
    model = keras.Model(inputs, keras.layers.Dense(2)(inputs))
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=0.01), loss="mse")
    x, y = np.random.default_rng(0).normal(size=(8, 4)), np.zeros((8, 2))
    model.fit(x, y, batch_size=4, epochs=1, verbose=0)
    return model


def _values(variables):
    return [np.asarray(v) for v in variables]


def test_a_model_round_trips_with_its_weights_and_optimizer_state():
    model = _trained_model()
    serialized = serialization.serialize_model(model)
    assert isinstance(serialized, str)
    loaded = serialization.deserialize_model(serialized, keras.models.load_model)
    for a, b in zip(_values(model.weights), _values(loaded.weights)):
        np.testing.assert_array_equal(a, b)
    assert type(loaded.optimizer).__name__ == "Adam"
    saved_state, loaded_state = _values(model.optimizer.variables), _values(loaded.optimizer.variables)
    assert len(saved_state) == len(loaded_state) and int(loaded.optimizer.iterations) == 2
    for a, b in zip(saved_state, loaded_state):
        np.testing.assert_array_equal(a, b)


def test_the_loader_gets_a_keras_file_path():
    """Horovod's contract: the caller's loader (hvd.load_model on the ranks) gets what Keras loads."""
    seen = []
    serialization.deserialize_model(serialization.serialize_model(_trained_model()),
                                    lambda path: seen.append(path) or keras.models.load_model(path))
    assert len(seen) == 1 and seen[0].endswith(".keras")


def test_a_built_optimizer_round_trips_with_its_state():
    model = _trained_model()
    restored = serialization.deserialize_optimizer(
        _loads(serialization.serialize_optimizer(model.optimizer)), model=model)
    assert type(restored).__name__ == "Adam" and abs(float(restored.learning_rate) - 0.01) < 1e-9
    for a, b in zip(_values(model.optimizer.variables), _values(restored.variables)):
        np.testing.assert_array_equal(a, b)


def test_an_unbuilt_optimizer_and_an_optimizer_name_round_trip():
    restored = serialization.deserialize_optimizer(
        _loads(serialization.serialize_optimizer(keras.optimizers.SGD(learning_rate=0.3, momentum=0.5))))
    assert type(restored).__name__ == "SGD" and abs(float(restored.momentum) - 0.5) < 1e-9
    assert serialization.serialize_optimizer("sgd") == "sgd"
    assert serialization.deserialize_optimizer("sgd") == "sgd"


def _loads(serialized):
    """What the estimator's Params reader does before deserialize_optimizer."""
    from horovod.runner.common.util import codec
    return codec.loads_base64(serialized)


def test_model_shapes_mark_unknown_dimensions():
    a, b = keras.Input(shape=(3,)), keras.Input(shape=(None, 5))
    out = keras.layers.Dense(2)(keras.layers.Concatenate()([a, keras.layers.GlobalAveragePooling1D()(b)]))
    assert model_shapes(keras.Model([a, b], out)) == ([[-1, 3], [-1, -1, 5]], [[-1, 2]])


def test_output_names_of_functional_and_sequential_models():
    """Keras 3's Sequential has no output_names (Keras 2's had): its output is its last layer's."""
    inputs = keras.Input(shape=(3,))
    assert output_names(keras.Model(inputs, keras.layers.Dense(1, name="y")(inputs))) == ["y"]
    sequential = keras.Sequential([keras.Input(shape=(3,)), keras.layers.Dense(4), keras.layers.Dense(2, name="probs")])
    assert output_names(sequential) == ["probs"]


def test_checkpoint_files_are_named_for_keras_3():
    assert serialization.checkpoint_path("/run/checkpoint") == "/run/checkpoint.keras"
    assert serialization.checkpoint_path("/run/best.keras") == "/run/best.keras"
