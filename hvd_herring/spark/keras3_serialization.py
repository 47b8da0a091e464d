"""KerasEstimator's models and optimizers as bytes, for Keras 3.

Horovod 0.28.1 moves a Keras model between the driver, the executors and the store as an HDF5 file
written into an h5py.File (`keras.models.save_model(model, h5py_file)`), and an optimizer as HDF5
attributes written with Keras 2's backend. Keras 3 saves only to a path named `.keras` (its zip
format) or `.h5`, and its optimizers' variables are a list with no Keras 2 backend to read them.
Under Keras 3 a serialized model is the base-64 of the `.keras` file's bytes: the same bytes as the
run's checkpoint file, so a checkpoint is read back as a serialized model without loading it. An
optimizer is its Keras config with the values of its variables when it has been built."""

import contextlib
import os
import shutil
import tempfile

import numpy as np
from horovod.runner.common.util import codec

KERAS_SUFFIX = ".keras"


def checkpoint_path(path):
    """The run's checkpoint file under Keras 3: the store's name, with the extension Keras 3's
    ModelCheckpoint and load_model require."""
    return path if path.endswith(KERAS_SUFFIX) else path + KERAS_SUFFIX


@contextlib.contextmanager
def _scratch_file():
    directory = tempfile.mkdtemp(prefix="hvd_herring_keras_")
    try:
        yield os.path.join(directory, "model" + KERAS_SUFFIX)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def read_model_file(path, opener=open):
    """A saved `.keras` file as a serialized model (`opener`: the store's filesystem's open, for a
    checkpoint in the store)."""
    with opener(path, "rb") as f:
        return codec.dumps_base64(f.read())


def serialize_model(model):
    with _scratch_file() as path:
        model.save(path)
        return read_model_file(path)


def deserialize_model(model_bytes, load_model_fn):
    """load_model_fn(path) of the serialized model written back to a `.keras` file (Horovod's
    contract: the caller chooses the loader, e.g. hvd.load_model for a distributed optimizer)."""
    with _scratch_file() as path:
        with open(path, "wb") as f:
            f.write(codec.loads_base64(model_bytes))
        return load_model_fn(path)


def keras_loader(keras, custom_objects):
    """A load_model_fn for deserialize_model: Keras's own load_model, with the user's custom objects."""
    def load(path):
        with keras.utils.custom_object_scope(custom_objects):
            return keras.models.load_model(path)
    return load


def serialize_optimizer(optimizer):
    if isinstance(optimizer, str):
        return optimizer    # a Keras optimizer's name, as Horovod keeps it
    import keras
    values = [np.asarray(v) for v in optimizer.variables] if optimizer.built else []
    return codec.dumps_base64({"config": keras.optimizers.serialize(optimizer), "variables": values})


def deserialize_optimizer(serialized, model=None):
    """The optimizer from serialize_optimizer (after the params reader's loads_base64); its state
    is restored when it had been built and the model to build it for is given."""
    if isinstance(serialized, str):
        return serialized
    import keras
    optimizer = keras.optimizers.deserialize(serialized["config"])
    if serialized["variables"] and model is not None:
        optimizer.build(model.trainable_variables)
        optimizer.set_weights(serialized["variables"])
    return optimizer


def adapt_util(util_module):
    """Under Keras 3, TFKerasUtil's serializers (the estimator params' writer and reader use them)
    are the ones above."""
    from hvd_herring.tensorflow.keras_flavour import is_keras2
    if is_keras2():
        return
    util = util_module.TFKerasUtil
    util.serialize_model = staticmethod(serialize_model)
    util.deserialize_model = staticmethod(deserialize_model)
    util.serialize_optimizer = staticmethod(serialize_optimizer)
    util.deserialize_optimizer = staticmethod(deserialize_optimizer)
