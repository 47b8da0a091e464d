"""horovod.tensorflow's TF1-style API on TF 2.21's tf.compat.v1: DistributedOptimizer around a
tf.compat.v1.train.Optimizer, broadcast_global_variables and BroadcastGlobalVariablesHook (graph
mode and sessions). hvd.DistributedOptimizer given a Keras optimizer (of the Keras tf.keras is)
returns horovod.tensorflow.keras's."""

import tensorflow as tf

from horovod.common.process_sets import global_process_set
from horovod.tensorflow.compression import Compression
from hvd_herring.tensorflow.functions import broadcast_variables

from hvd_herring.tensorflow.gradient_reduction import GradientAllreducer, groups_or_num_groups, variable_key
from hvd_herring.tensorflow.mpi_ops import Adasum, Average, rank

_LegacyOptimizer = tf.compat.v1.train.Optimizer


class _DistributedOptimizer(_LegacyOptimizer):
    """Wraps a tf.compat.v1.train.Optimizer: compute_gradients() returns reduced gradients."""

    def __init__(self, optimizer, name, use_locking, reducer, backward_passes_per_step,
                 average_aggregated_gradients, sparse_as_dense, scale_local_gradients):
        name = name or f"Distributed{type(optimizer).__name__}"
        super().__init__(name=name, use_locking=use_locking)
        self._optimizer = optimizer
        self._allreduce_grads = reducer
        self.process_set = reducer.process_set
        self.scale_local_gradients = scale_local_gradients
        self._local_vars = set()
        self._agg_helper = None
        if backward_passes_per_step > 1:
            if tf.executing_eagerly():
                raise ValueError("backward_passes_per_step > 1 is not yet supported for _LegacyOptimizer with "
                                 "eager execution.")
            from horovod.tensorflow.gradient_aggregation import LocalGradientAggregationHelper
            self._agg_helper = LocalGradientAggregationHelper(
                backward_passes_per_step=backward_passes_per_step, allreduce_func=self._reduce,
                sparse_as_dense=sparse_as_dense, average_aggregated_gradients=average_aggregated_gradients,
                rank=rank(), optimizer_type=LocalGradientAggregationHelper._OPTIMIZER_TYPE_LEGACY,
                process_set=self.process_set, scale_local_gradients=scale_local_gradients, name=name)

    def _reduce(self, grads, variables):
        return self._allreduce_grads(grads, variables, local=self._local_vars,
                                     scale_local_gradients=self.scale_local_gradients)

    def register_local_var(self, var):
        """Gradients of `var` stay local to this rank (not reduced)."""
        if self._agg_helper:
            self._agg_helper.register_local_var(var)
        else:
            self._local_vars.add(variable_key(var))

    def compute_gradients(self, *args, **kwargs):
        """The wrapped optimizer's gradients, reduced over the process set."""
        grads_and_vars = self._optimizer.compute_gradients(*args, **kwargs)
        grads, variables = zip(*grads_and_vars)
        if self._agg_helper:
            reduced = self._agg_helper.compute_gradients(grads, variables)
        else:
            reduced = self._reduce(grads, variables)
        return list(zip(reduced, variables))

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        if self._agg_helper:
            return self._agg_helper.apply_gradients(
                lambda: self._optimizer.apply_gradients(grads_and_vars, global_step=global_step, name=name),
                self._optimizer, grads_and_vars, global_step=global_step, name=name)
        return self._optimizer.apply_gradients(grads_and_vars, global_step=global_step, name=name)

    def get_slot(self, *args, **kwargs):
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self, *args, **kwargs):
        return self._optimizer.variables(*args, **kwargs)


def DistributedOptimizer(optimizer, name=None, use_locking=False, device_dense='', device_sparse='',
                         compression=Compression.none, sparse_as_dense=False, backward_passes_per_step=1,
                         op=Average, gradient_predivide_factor=1.0, average_aggregated_gradients=False,
                         num_groups=0, groups=None, process_set=global_process_set, scale_local_gradients=True):
    """Horovod's hvd.DistributedOptimizer: wraps a tf.compat.v1.train.Optimizer, or a Keras
    optimizer (then it is horovod.tensorflow.keras.DistributedOptimizer)."""
    if op == Adasum and isinstance(optimizer, _LegacyOptimizer):
        # Horovod's TF1 Adasum optimizer reduces the deltas of a local step (_DistributedAdasumOptimizer),
        # not the gradients; Keras optimizers below reduce their gradients with Adasum, as Horovod's do.
        raise NotImplementedError("op=Adasum with a tf.compat.v1 optimizer is not supported by the herring "
                                  "backend; use a Keras optimizer (its gradients are reduced with Adasum)")
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError('gradient_predivide_factor not supported with op != Average')
    groups = groups_or_num_groups(groups, num_groups)
    if isinstance(optimizer, _LegacyOptimizer):
        name = name or f"Distributed{type(optimizer).__name__}"
        reducer = GradientAllreducer(name, device_dense, device_sparse, compression, sparse_as_dense, op,
                                     gradient_predivide_factor, groups, process_set)
        return _DistributedOptimizer(optimizer, name, use_locking, reducer, backward_passes_per_step,
                                     average_aggregated_gradients, sparse_as_dense, scale_local_gradients)
    from hvd_herring.tensorflow import keras as hvd_keras
    return hvd_keras.DistributedOptimizer(
        optimizer, name=name, device_dense=device_dense, device_sparse=device_sparse, compression=compression,
        sparse_as_dense=sparse_as_dense, gradient_predivide_factor=gradient_predivide_factor, op=op,
        backward_passes_per_step=backward_passes_per_step,
        average_aggregated_gradients=average_aggregated_gradients, groups=groups, process_set=process_set,
        scale_local_gradients=scale_local_gradients)


def broadcast_global_variables(root_rank):
    """Broadcasts every global variable (tf.compat.v1 graph mode) from `root_rank`."""
    if tf.executing_eagerly():
        raise RuntimeError("hvd.broadcast_global_variables() does not support eager execution. "
                           "Please use `hvd.broadcast_variables(<model/optimizer variables>)` instead.")
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank)


class BroadcastGlobalVariablesHook(tf.compat.v1.train.SessionRunHook):
    """SessionRunHook that broadcasts every global variable from `root_rank` once the session
    is created (TF1-style training loops)."""

    def __init__(self, root_rank, device=''):
        super().__init__()
        self.root_rank = root_rank
        self.bcast_op = None
        self.device = device

    def begin(self):
        if not self.bcast_op or self.bcast_op.graph != tf.compat.v1.get_default_graph():
            with tf.device(self.device):
                self.bcast_op = broadcast_global_variables(self.root_rank)

    def after_create_session(self, session, coord):
        session.run(self.bcast_op)
