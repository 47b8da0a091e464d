"""horovod.tensorflow.keras.elastic (and horovod.keras.elastic) for either Keras flavour: KerasState
and the callbacks that keep it current during model.fit (CommitStateCallback,
UpdateBatchStateCallback, UpdateEpochStateCallback).

The callbacks' logic is Horovod's flavour-free one (horovod._keras.elastic, pure Python); only
their Keras base class is chosen here, by what tf.keras is."""

import tensorflow as tf

from horovod._keras import elastic as _impl

from hvd_herring.tensorflow.elastic import TensorFlowKerasState, run  # noqa: F401
from hvd_herring.tensorflow.keras_flavour import flavour

_Callback = flavour().Callback


class KerasState(TensorFlowKerasState):
    """State of a Keras model and its optimizer (the compiled one by default), plus the keyword
    attributes (e.g. batch=0, epoch=0)."""

    def __init__(self, model, optimizer=None, **kwargs):
        super().__init__(model, optimizer=optimizer, backend=tf.keras.backend, **kwargs)


class CommitStateCallback(_impl.CommitStateCallbackImpl, _Callback):
    """Commits `state` every `batches_per_commit` batches and at the end of each epoch."""

    def __init__(self, state, batches_per_commit=1):
        super().__init__(tf.keras.backend, state, batches_per_commit)


class UpdateBatchStateCallback(_impl.UpdateBatchStateCallbackImpl, _Callback):
    """Keeps `state.batch` at the current batch (0 at the end of each epoch); after a reset the
    epoch resumes where it stopped."""

    def __init__(self, state):
        super().__init__(tf.keras.backend, state)


class UpdateEpochStateCallback(_impl.UpdateEpochStateCallbackImpl, _Callback):
    """Keeps `state.epoch` at the number of epochs completed, across resets."""

    def __init__(self, state):
        super().__init__(tf.keras.backend, state)
