"""What is specific to Keras 2 (tf_keras; tf.keras with TF_USE_LEGACY_KERAS=1) in Horovod's Keras
API.

Keras 2 computes gradients in the optimizer: model.fit -> train_step -> optimizer.minimize ->
compute_gradients (tf.keras.optimizers.Optimizer) or _compute_gradients (the legacy
tf.keras.optimizers.legacy.Optimizer), then apply_gradients. As in Horovod, the distributed
optimizer reduces the gradients where they are computed, so compute_gradients, _compute_gradients
and get_gradients all return reduced gradients, and apply_gradients applies what it is given.

backward_passes_per_step=N uses Horovod's gradient aggregation helpers (its pure-Python
horovod.tensorflow.gradient_aggregation[_eager], running on our collectives): compute_gradients
returns the running local sum, reduced on every N-th pass, and apply_gradients applies it only
then (otherwise it counts the pass in `iterations`). `opt._agg_helper.counter` is the number of
passes since the last reduction, as in Horovod.

Every flavour module offers the same names: keras, Callback, DistributedOptimizerMixin,
check_optimizer, optimizer_classes, learning_rate, evaluate, broadcast_global_variables.
"""

import tensorflow as tf

from hvd_herring.tensorflow.keras.optimizer import CallableList, DistributedOptimizerBase
from hvd_herring.tensorflow.gradient_reduction import variable_key
from hvd_herring.tensorflow.mpi_ops import rank

# tf.keras is Keras 2 here: tf_keras (TensorFlow 2.16+), or the keras 2.x package before.
keras = tf.keras
Callback = tf.keras.callbacks.Callback
_backend = tf.keras.backend


def _optimizer_bases():
    bases = [tf.keras.optimizers.Optimizer]
    legacy = getattr(tf.keras.optimizers, "legacy", None)
    if legacy is not None:
        bases.append(legacy.Optimizer)
    return tuple(bases)


def check_optimizer(optimizer):
    if not isinstance(optimizer, _optimizer_bases()):
        raise TypeError(f"horovod.tensorflow.keras.DistributedOptimizer wraps a tf.keras.optimizers.Optimizer "
                        f"(tf.keras is Keras 2 here: TF_USE_LEGACY_KERAS=1), got {type(optimizer).__module__}."
                        f"{type(optimizer).__name__}; for tf.compat.v1 optimizers use "
                        "horovod.tensorflow.DistributedOptimizer")


def optimizer_classes(legacy_opts):
    if legacy_opts:
        return tf.keras.optimizers.legacy.Optimizer.__subclasses__()
    return tf.keras.optimizers.Optimizer.__subclasses__()


def learning_rate(optimizer):
    return float(_backend.get_value(optimizer.learning_rate))


def evaluate(value):
    """A result of the Keras helpers: as it is when eager, computed in Keras's session otherwise
    (TF1-style graphs), as Horovod does."""
    if tf.executing_eagerly():
        return value
    return tf.compat.v1.keras.backend.get_session().run(value)


def broadcast_global_variables(root_rank):
    """Broadcasts every global variable from root_rank in Keras's session (graph mode only;
    eagerly, use BroadcastGlobalVariablesCallback or hvd.broadcast_variables)."""
    from hvd_herring.tensorflow.legacy import broadcast_global_variables as broadcast_op
    return evaluate(broadcast_op(root_rank))


class DistributedOptimizerMixin(DistributedOptimizerBase):
    """Placed in front of the wrapped optimizer's class (tf.keras.optimizers.Optimizer or
    tf.keras.optimizers.legacy.Optimizer), so super() is that class."""

    _HAS_AGGREGATE_GRAD = True

    def _hvd_configure(self):
        settings = self._hvd
        if settings.backward_passes_per_step > 1 and settings.agg_helper is None:
            if tf.executing_eagerly():
                from horovod.tensorflow.gradient_aggregation_eager import LocalGradientAggregationHelperEager
                settings.agg_helper = LocalGradientAggregationHelperEager(
                    backward_passes_per_step=settings.backward_passes_per_step, allreduce_func=settings.reducer,
                    sparse_as_dense=settings.sparse_as_dense,
                    average_aggregated_gradients=settings.average_aggregated_gradients,
                    process_set=settings.reducer.process_set, scale_local_gradients=settings.scale_local_gradients)
            else:
                from horovod.tensorflow.gradient_aggregation import LocalGradientAggregationHelper
                settings.agg_helper = LocalGradientAggregationHelper(
                    backward_passes_per_step=settings.backward_passes_per_step, allreduce_func=settings.reducer,
                    sparse_as_dense=settings.sparse_as_dense,
                    average_aggregated_gradients=settings.average_aggregated_gradients, rank=rank(),
                    optimizer_type=LocalGradientAggregationHelper._OPTIMIZER_TYPE_KERAS,
                    process_set=settings.reducer.process_set, scale_local_gradients=settings.scale_local_gradients)

    @property
    def _agg_helper(self):
        return self._hvd_settings().agg_helper

    @property
    def variables(self):
        variables = super().variables  # a list; a method in tf.keras.optimizers.legacy
        return CallableList(variables if isinstance(variables, list) else variables())

    def register_local_var(self, var):
        """Gradients of `var` stay local to this rank (not reduced)."""
        settings = self._hvd_settings()
        if settings.agg_helper is not None:
            settings.agg_helper.register_local_var(var)
        else:
            settings.local_vars.add(variable_key(var))

    def compute_gradients(self, loss, var_list, tape=None):
        """The wrapped optimizer's gradients, reduced over the process set."""
        return self._compute_gradients(loss, var_list, None, tape)

    def _compute_gradients(self, loss, var_list, grad_loss=None, tape=None):
        base = super()
        if hasattr(base, "_compute_gradients"):  # tf.keras.optimizers.legacy
            grads_and_vars = base._compute_gradients(loss, var_list, grad_loss, tape=tape)
        else:
            grads_and_vars = base.compute_gradients(loss, var_list, tape=tape)
        grads, variables = zip(*grads_and_vars)
        return list(zip(self._allreduce(grads, variables), variables))

    def get_gradients(self, loss, params):
        """Legacy optimizers' graph-mode gradients, reduced over the process set."""
        return self._allreduce(super().get_gradients(loss, params), params)

    def _aggregate_gradients(self, grads_and_vars):
        # tf.distribute's aggregation, left to the wrapped optimizer (Horovod's helpers call it).
        base = super()
        if hasattr(base, "_aggregate_gradients"):
            return base._aggregate_gradients(grads_and_vars)
        return base.aggregate_gradients(grads_and_vars)

    def _allreduce(self, grads, variables):
        settings = self._hvd_settings()
        if settings.agg_helper is not None:
            return settings.agg_helper.compute_gradients(tuple(grads), tuple(variables))
        return settings.reduce(grads, variables)

    def apply_gradients(self, grads_and_vars, *args, **kwargs):
        helper = self._hvd_settings().agg_helper
        if helper is None:
            return super().apply_gradients(grads_and_vars, *args, **kwargs)
        grads_and_vars = list(grads_and_vars)  # used by both branches below
        apply = super().apply_gradients
        if type(helper).__name__ == "LocalGradientAggregationHelper":
            # The TF1 graph helper: Horovod's own apply logic for sessions.
            return helper.apply_gradients(lambda: apply(grads_and_vars, *args, **kwargs), self, grads_and_vars,
                                          *args, **kwargs)

        def apply_step():
            apply(grads_and_vars, *args, **kwargs)

        def count_pass():
            self.iterations.assign_add(1)

        # The helper resets its counter to 0 on the pass that reduced the sums.
        tf.cond(tf.equal(helper.counter, 0), apply_step, count_pass)
        return self.iterations
