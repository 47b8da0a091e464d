"""horovod.tensorflow.elastic on the herring engine: the state objects (TensorFlowState for a list
of variables, TensorFlowKerasState for a Keras model and its optimizer, either Keras flavour) and
the `run` decorator, on top of Horovod's flavour-free elastic machinery (horovod.common.elastic).

State objects keep a copy of their variables and attributes: commit() saves it, restore() puts it
back, sync() makes every rank take the root rank's. `run` retries the wrapped function from the
last commit when a collective fails because a rank is gone (HorovodInternalError), as Horovod does.
"""

import tensorflow as tf

from horovod.common.elastic import ObjectState, run_fn
from horovod.common.exceptions import HorovodInternalError

from hvd_herring.tensorflow.functions import broadcast_object, broadcast_object_fn, broadcast_variables
from hvd_herring.tensorflow.keras_flavour import optimizer_variables
from hvd_herring.tensorflow.mpi_ops import init, rank, shutdown


def _is_collective_failure(error):
    """A collective of ours failed on this rank (in eager mode the op type names it, in a graph
    the node, whose name Horovod's naming starts with Horovod<Op>)."""
    message = getattr(error, "message", "") or str(error)
    return "Herring" in message or "Horovod" in message


def run(func):
    """Decorator running elastic training: `func(state, ...)` runs after the state is synced and
    is restarted from the last commit when a collective fails (see horovod.common.elastic)."""

    def wrapper(state, *args, **kwargs):
        try:
            return func(state, *args, **kwargs)
        except tf.errors.UnknownError as e:
            if _is_collective_failure(e):
                raise HorovodInternalError(e) from e
            raise

    return run_fn(wrapper, _reset)


def _reset():
    shutdown()
    init()


def _eager():
    return tf.executing_eagerly()


class _VariablesState(ObjectState):
    """An ObjectState that also keeps a copy of variables; a subclass says how they are broadcast
    from the root rank (_broadcast_variables), saved (_save_model) and put back (_load_model)."""

    def save(self):
        self._save_model()
        super().save()

    def restore(self):
        self._load_model()
        super().restore()

    def sync(self):
        self._broadcast_variables()
        self._save_model()
        super().sync()


class TensorFlowKerasState(_VariablesState):
    """State of a Keras model and its optimizer (the model's compiled one by default), plus the
    keyword attributes. `backend` (tf.keras.backend) is needed for TF1-style graph mode only."""

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        if hasattr(model, "build") and not model.built:
            raise ValueError('Model must be built first. Run `model.build(input_shape)`.')
        self.model = model
        self.optimizer = optimizer or model.optimizer
        self.backend = backend
        self._save_model()
        if not backend or _eager():
            self._broadcast_variables = self._broadcast_eagerly
            bcast_object = broadcast_object
        else:
            # One broadcast op built now and run at each sync.
            bcast_op = broadcast_variables(tf.compat.v1.global_variables(), root_rank=0)
            self._broadcast_variables = lambda: self.backend.get_session().run(bcast_op)
            bcast_object = broadcast_object_fn(session=self.backend.get_session())
        super().__init__(bcast_object=bcast_object, get_rank=rank, **kwargs)

    def _broadcast_eagerly(self):
        broadcast_variables(self.model.variables, root_rank=0)
        broadcast_variables(optimizer_variables(self.optimizer), root_rank=0)

    def _save_model(self):
        if _eager():
            self._saved_model_state = [tf.identity(v) for v in self.model.variables]
            self._saved_optimizer_state = [tf.identity(v) for v in optimizer_variables(self.optimizer)]
        else:
            self._saved_model_state = self.model.get_weights()
            self._saved_optimizer_state = self.optimizer.get_weights()

    def _load_model(self):
        if _eager():
            for var, saved in zip(self.model.variables, self._saved_model_state):
                var.assign(saved)
            for var, saved in zip(optimizer_variables(self.optimizer), self._saved_optimizer_state):
                var.assign(saved)
        else:
            self.model.set_weights(self._saved_model_state)
            self.optimizer.set_weights(self._saved_optimizer_state)


class TensorFlowState(_VariablesState):
    """State of a list of tf.Variables (all global variables by default), plus the keyword
    attributes. In graph mode the values are read and written through `session` (the default
    session by default)."""

    def __init__(self, variables=None, session=None, **kwargs):
        self.variables = variables or tf.compat.v1.global_variables()
        self.session = session or (None if _eager() else tf.compat.v1.get_default_session())
        # Graph mode: the broadcast op, built once and run at each sync.
        self._bcast_op = None if _eager() else broadcast_variables(self.variables, root_rank=0)
        self._save_model()
        bcast_object = broadcast_object if _eager() else broadcast_object_fn(session=self.session)
        super().__init__(bcast_object=lambda obj: bcast_object(obj), get_rank=rank, **kwargs)

    def _broadcast_variables(self):
        if self._bcast_op is not None:
            self.session.run(self._bcast_op)
        else:
            broadcast_variables(self.variables, root_rank=0)

    def _save_model(self):
        if _eager():
            self._values = [v.numpy() for v in self.variables]
        else:
            self._values = [v.eval(self.session) for v in self.variables]

    def _load_model(self):
        for var, value in zip(self.variables, self._values):
            if _eager():
                var.assign(value)
            else:
                var.load(value, self.session)


__all__ = ["TensorFlowKerasState", "TensorFlowState", "run"]
