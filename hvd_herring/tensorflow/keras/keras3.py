"""What is specific to Keras 3 (tf.keras in TensorFlow 2.16+ by default) in Horovod's Keras API.

Keras 3 routes every update through Optimizer.apply(grads, trainable_variables) (model.fit ->
train_step -> apply_gradients -> apply), so that is the one method the distributed optimizer
overrides. backward_passes_per_step=N accumulates gradients locally and reduces and applies them
on every N-th pass only; `iterations` still counts every pass, as in Horovod.

Every flavour module offers the same names: keras, Callback, DistributedOptimizerMixin,
check_optimizer, optimizer_classes, learning_rate, evaluate, broadcast_global_variables.
"""

import keras
import tensorflow as tf

from hvd_herring.tensorflow.keras.optimizer import CallableList, DistributedOptimizerBase

Callback = keras.callbacks.Callback


def check_optimizer(optimizer):
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise TypeError(f"horovod.tensorflow.keras.DistributedOptimizer wraps a keras.optimizers.Optimizer, got "
                        f"{type(optimizer).__name__}; for tf.compat.v1 optimizers use "
                        "horovod.tensorflow.DistributedOptimizer (tf.keras is Keras 3 here; for Keras 2 "
                        "optimizers set TF_USE_LEGACY_KERAS=1 before TensorFlow is imported)")


def optimizer_classes(legacy_opts):
    if legacy_opts:
        raise ValueError("Keras 3 has no legacy optimizers (legacy_opts=True)")
    return keras.optimizers.Optimizer.__subclasses__()


def learning_rate(optimizer):
    return float(keras.ops.convert_to_numpy(optimizer.learning_rate))


def evaluate(value):
    """Keras 3 runs eagerly outside its compiled functions: values are already computed."""
    return value


def broadcast_global_variables(root_rank):
    """Keras 2 broadcast every variable of the session's graph; Keras 3 has no global variables.
    Raises with what to use instead."""
    raise NotImplementedError(
        "Keras 3 has no global variables: use hvd.callbacks.BroadcastGlobalVariablesCallback(root_rank) in "
        "model.fit, or horovod.tensorflow.broadcast_variables(model.variables, root_rank)")


class DistributedOptimizerMixin(DistributedOptimizerBase):
    """Placed in front of the wrapped optimizer's class, so super() is that class."""

    @property
    def variables(self):
        return CallableList(super().variables)

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
            super(DistributedOptimizerMixin, self).apply(settings.reduce(summed, applied), applied)
            for acc in accumulators:
                acc.assign(tf.zeros_like(acc))
            return tf.constant(True)

        def keep_accumulating():
            self._iterations.assign_add(1)
            return tf.constant(False)

        return tf.cond(tf.equal(settings.passes % n, 0), reduce_and_apply, keep_accumulating)
