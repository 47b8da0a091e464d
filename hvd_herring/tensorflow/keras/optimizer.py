"""DistributedOptimizer for Keras 3: wraps any keras.optimizers.Optimizer so that gradients are
averaged over the ranks before they are applied.

Keras 3 routes every update through Optimizer.apply(grads, trainable_variables) (model.fit ->
train_step -> apply_gradients -> apply), so that is the one method overridden. The distributed
optimizer is an instance of a subclass of the wrapped optimizer's class, with the same name and
module, so a model saved with it loads without Horovod.

backward_passes_per_step=N accumulates gradients locally and reduces and applies them on every
N-th pass only; `iterations` still counts every pass, as in Horovod."""

import keras
import tensorflow as tf

from horovod.common.process_sets import global_process_set
from horovod.tensorflow.compression import Compression

from hvd_herring.tensorflow.gradient_reduction import GradientAllreducer, variable_key
from hvd_herring.tensorflow.mpi_ops import Average, Sum


class _Settings:
    """What a distributed optimizer instance does besides the wrapped optimizer's update."""

    def __init__(self, reducer, backward_passes_per_step=1, average_aggregated_gradients=False,
                 scale_local_gradients=True):
        self.reducer = reducer
        self.backward_passes_per_step = backward_passes_per_step
        self.average_aggregated_gradients = average_aggregated_gradients
        self.scale_local_gradients = scale_local_gradients
        self.local_vars = set()
        self.accumulators = []  # backward_passes_per_step > 1: built with the optimizer
        self.passes = None

    def reduce(self, grads, variables):
        return self.reducer(grads, variables, local=self.local_vars, scale_local_gradients=self.scale_local_gradients)


class _CallableList(list):
    """optimizer.variables is a list in Keras 3 and was a method before: both spellings work."""

    def __call__(self):
        return self


class _DistributedOptimizerMixin:
    """Placed in front of the wrapped optimizer's class, so super() is that class."""

    _hvd = None  # a _Settings; a default one when the optimizer was loaded from a saved model

    def _hvd_settings(self):
        if self._hvd is None:
            self._hvd = _Settings(GradientAllreducer(f"Distributed{type(self).__name__}"))
        return self._hvd

    def register_local_var(self, var):
        """Gradients of `var` stay local to this rank (not reduced)."""
        self._hvd_settings().local_vars.add(variable_key(var))

    @property
    def variables(self):
        return _CallableList(super().variables)

    def build(self, variables):
        super().build(variables)
        settings = self._hvd_settings()
        if settings.backward_passes_per_step > 1:
            # Plain tf.Variables kept with the settings, not optimizer variables: they hold
            # rank-local sums that must never be broadcast (BroadcastGlobalVariablesCallback
            # broadcasts the optimizer's variables after the first batch) nor saved.
            with tf.init_scope():
                settings.accumulators = [tf.Variable(tf.zeros(v.shape, v.dtype), trainable=False,
                                                     name="hvd_accumulated_grad") for v in variables]
                settings.passes = tf.Variable(tf.constant(0, tf.int64), trainable=False, name="hvd_backward_passes")

    def apply(self, grads, trainable_variables=None):
        settings = self._hvd_settings()
        grads = list(grads)
        if not grads:
            return super().apply(grads, trainable_variables)
        if trainable_variables is None:
            if not self.built:
                return super().apply(grads, trainable_variables)  # raises Keras's own error
            variables = list(self._trainable_variables)
        else:
            variables = list(trainable_variables)
            if not self.built:
                with keras.name_scope(self.name, caller=self):
                    self.build(variables)
                self.built = True
        if settings.backward_passes_per_step == 1:
            return super().apply(settings.reduce(grads, variables), variables)
        return self._hvd_apply_accumulated(settings, grads, variables)

    def _hvd_apply_accumulated(self, settings, grads, variables):
        n = settings.backward_passes_per_step
        accumulators = [settings.accumulators[self._get_variable_index(v)] for v in variables]
        for g, acc in zip(grads, accumulators):
            if g is not None:
                acc.assign_add(tf.cast(tf.convert_to_tensor(g), acc.dtype))
        settings.passes.assign_add(1)
        present = [i for i, g in enumerate(grads) if g is not None]

        def reduce_and_apply():
            summed = [tf.convert_to_tensor(accumulators[i]) for i in present]
            if settings.average_aggregated_gradients:
                summed = [s / tf.cast(n, s.dtype) for s in summed]
            applied = [variables[i] for i in present]
            super(_DistributedOptimizerMixin, self).apply(settings.reduce(summed, applied), applied)
            for acc in accumulators:
                acc.assign(tf.zeros_like(acc))
            return tf.constant(True)

        def keep_accumulating():
            self._iterations.assign_add(1)
            return tf.constant(False)

        return tf.cond(tf.equal(settings.passes % n, 0), reduce_and_apply, keep_accumulating)


_CLASSES = {}


def _distributed_class(base):
    cls = _CLASSES.get(base)
    if cls is None:
        cls = type(base.__name__, (_DistributedOptimizerMixin, base),
                   {"__module__": base.__module__, "__qualname__": base.__qualname__})
        _CLASSES[base] = cls
    return cls


def DistributedOptimizer(optimizer, name=None, device_dense='', device_sparse='', compression=Compression.none,
                         sparse_as_dense=False, gradient_predivide_factor=1.0, op=Average,
                         backward_passes_per_step=1, average_aggregated_gradients=False, num_groups=0,
                         groups=None, process_set=global_process_set, scale_local_gradients=True):
    """A keras.optimizers.Optimizer that averages (op=Average) or sums (op=Sum) gradients over
    the process set before applying them.

    Args are Horovod's: `compression` (Compression.fp16), `sparse_as_dense`,
    `gradient_predivide_factor`, `backward_passes_per_step` (accumulate N passes locally, then
    reduce once; `average_aggregated_gradients` divides the sum by N), `groups` (N, or lists of
    variables reduced together as one collective), `process_set`, `scale_local_gradients`.
    `name` prefixes the collectives' names. Returns a new optimizer built from the given one's
    config (its state is not copied), as Horovod does.
    """
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise TypeError(f"horovod.tensorflow.keras.DistributedOptimizer wraps a keras.optimizers.Optimizer, got "
                        f"{type(optimizer).__name__}; for tf.compat.v1 optimizers use "
                        "horovod.tensorflow.DistributedOptimizer")
    if isinstance(optimizer, _DistributedOptimizerMixin):
        raise ValueError("this optimizer is already a DistributedOptimizer")
    if op not in (Average, Sum):
        raise ValueError('op currently only supports Average and Sum')
    if backward_passes_per_step < 1:
        raise ValueError("backward_passes_per_step must be >= 1")
    if num_groups != 0 and groups is None:
        groups = num_groups
    base = type(optimizer)
    reducer = GradientAllreducer(name or f"Distributed{base.__name__}", device_dense, device_sparse, compression,
                                 sparse_as_dense, op, gradient_predivide_factor, groups, process_set)
    distributed = _distributed_class(base).from_config(optimizer.get_config())
    distributed._hvd = _Settings(reducer, backward_passes_per_step, average_aggregated_gradients,
                                 scale_local_gradients)
    return distributed


def distributed_class_for(optimizer_class):
    """The distributed subclass of a Keras optimizer class (load_model uses it)."""
    return _distributed_class(optimizer_class)
