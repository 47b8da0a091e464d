"""Averaging gradients across ranks: what DistributedGradientTape and both DistributedOptimizers
(Keras 3 and tf.compat.v1) share.

Gradients are reduced one collective per gradient (the engine fuses them), or in explicit groups
(`groups=N`: N groups of about equal count; `groups=[[v1, v2], ...]`: those variables together,
every other one alone), each group one grouped collective that is never split. In eager mode the
reduction runs inside a tf.function, so every collective of a step is in flight at once, as
Horovod does."""

import collections
import os
import warnings

import tensorflow as tf

from horovod.common.process_sets import global_process_set
from horovod.common.util import split_list
from horovod.tensorflow.compression import Compression

from hvd_herring.tensorflow import collectives
from hvd_herring.tensorflow import mpi_ops
from hvd_herring.tensorflow.mpi_ops import Average


def _elastic():
    """horovodrun's elastic mode (--host-discovery-script sets HOROVOD_ELASTIC=1)."""
    return os.environ.get("HOROVOD_ELASTIC") == "1"


def variable_key(variable):
    """A hashable identity for a variable or tensor (Keras 3 variables have no .ref())."""
    return id(variable)


def groups_or_num_groups(groups, num_groups):
    """The `groups` of a DistributedOptimizer or DistributedGradientTape, or their deprecated
    `num_groups` (with Horovod's warning) when groups is not given."""
    if num_groups != 0:
        warnings.warn('Parameter `num_groups` has been replaced by `groups` and will be removed in v0.23.0.',
                      DeprecationWarning)
        if groups is None:
            groups = num_groups
    return groups


class GradientAllreducer:
    def __init__(self, name, device_dense='', device_sparse='', compression=Compression.none,
                 sparse_as_dense=False, op=Average, gradient_predivide_factor=1.0, groups=None,
                 process_set=global_process_set):
        if groups is not None and not (isinstance(groups, list) or groups > 0):
            raise ValueError('groups should be a non-negative integer or a list of list of tf.Variable.')
        if gradient_predivide_factor != 1.0 and op != Average:
            raise ValueError('gradient_predivide_factor not supported with op != Average')
        self.name = name
        self._device_dense = device_dense
        self._device_sparse = device_sparse
        self._compression = compression
        self._sparse_as_dense = sparse_as_dense
        self._op = op
        # Average = sum * (1 / size): the predivide factor moves part of it before the sum.
        self._prescale = 1.0 / gradient_predivide_factor if op == Average else 1.0
        self._postscale = gradient_predivide_factor if op == Average else 1.0
        self._groups = groups
        self.process_set = process_set
        self._eager_reduce = None

    def __call__(self, grads, variables=None, local=(), scale_local_gradients=True, use_generic_names=False):
        """The reduced gradients, in the order given (None stays None). Gradients of variables
        whose key (variable_key) is in `local` are not reduced; with scale_local_gradients they
        are divided by the set's size, as Horovod does."""
        grads = list(grads)
        variables = list(variables) if variables is not None else [None] * len(grads)
        shared = [i for i, v in enumerate(variables) if v is None or variable_key(v) not in local]
        out = list(grads)
        if local and scale_local_gradients:
            n = self.process_set.size()
            for i, v in enumerate(variables):
                if v is not None and variable_key(v) in local and grads[i] is not None:
                    out[i] = _divide(grads[i], n)
        if not self.process_set.included():
            return out
        # Traced into a graph in an elastic job, the size is decided when the step runs, as
        # Horovod does (tf.cond on size_op()): a tf.function traced while the job had one worker
        # must still reduce after others joined (and one traced at three must skip the reduction
        # once the job shrank to one), since the trace is not redone when the membership changes.
        traced_elastic = _elastic() and not tf.executing_eagerly()
        if not traced_elastic and self.process_set.size() <= 1:
            return out
        shared_grads = [grads[i] for i in shared]
        plan, grouped = self._plan(shared_grads, [variables[i] for i in shared])
        if traced_elastic:
            present = [i for i, g in enumerate(shared_grads) if g is not None]
            reduced_present = tf.cond(
                mpi_ops.size_op(process_set_id=self.process_set.process_set_id) > 1,
                lambda: [self._reduce(shared_grads, plan, grouped, use_generic_names)[i] for i in present],
                lambda: [tf.identity(shared_grads[i]) if not isinstance(shared_grads[i], tf.IndexedSlices)
                         else shared_grads[i] for i in present])
            reduced = list(shared_grads)
            for i, r in zip(present, reduced_present):
                reduced[i] = r
        elif tf.executing_eagerly():
            if self._eager_reduce is None:
                self._eager_reduce = tf.function(self._reduce)
            reduced = self._eager_reduce(shared_grads, plan, grouped, use_generic_names)
        else:
            reduced = self._reduce(shared_grads, plan, grouped, use_generic_names)
        for i, r in zip(shared, reduced):
            out[i] = r
        return out

    def _plan(self, grads, variables):
        """Which gradients are reduced together: a tuple of position tuples, and whether they
        are explicit groups."""
        present = [i for i, g in enumerate(grads) if g is not None]
        if self._groups is None:
            return tuple((i,) for i in present), False
        if isinstance(self._groups, list):
            position = {variable_key(v): i for i, v in enumerate(variables) if v is not None}
            taken, plan = set(), []
            for group in self._groups:
                members = tuple(position[variable_key(v)] for v in group
                                if variable_key(v) in position and grads[position[variable_key(v)]] is not None)
                if members:
                    plan.append(members)
                    taken.update(members)
            plan.extend((i,) for i in present if i not in taken)
            return tuple(plan), True
        return tuple(tuple(chunk) for chunk in split_list(present, self._groups) if chunk), True

    def _reduce(self, grads, plan, grouped, use_generic_names):
        out = list(grads)
        with tf.name_scope(self.name + "_Allreduce"):
            if self._sparse_as_dense:
                out = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in out]
            common = dict(device_dense=self._device_dense, device_sparse=self._device_sparse,
                          compression=self._compression, op=self._op, prescale_factor=self._prescale,
                          postscale_factor=self._postscale, process_set=self.process_set,
                          ignore_name_scope=use_generic_names)
            for g, members in enumerate(plan):
                if grouped:
                    reduced = collectives.grouped_allreduce(
                        [out[i] for i in members], name=f"grad_group_{g}" if use_generic_names else None, **common)
                    for i, r in zip(members, reduced):
                        out[i] = r
                else:
                    (i,) = members
                    out[i] = collectives.allreduce(out[i], name=f"grad_{i}" if use_generic_names else None, **common)
        return out


def _divide(grad, n):
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(grad.values / tf.cast(n, grad.values.dtype), grad.indices, grad.dense_shape)
    return grad / tf.cast(n, grad.dtype)


# Recently built reducers: a DistributedGradientTape is typically created on every step, and a
# reducer's eager tf.function must survive between steps or it is traced again each time.
_REDUCERS = collections.OrderedDict()
_MAX_REDUCERS = 32


def cached_allreducer(name, device_dense='', device_sparse='', compression=Compression.none, sparse_as_dense=False,
                      op=Average, gradient_predivide_factor=1.0, groups=None, process_set=global_process_set):
    """A GradientAllreducer for these arguments, the same object as last time if they are equal
    (variables in `groups` compared by identity)."""
    group_ids = tuple(tuple(id(v) for v in g) for g in groups) if isinstance(groups, list) else groups
    key = (name, device_dense, device_sparse, compression, sparse_as_dense, op, gradient_predivide_factor,
           group_ids, process_set.process_set_id, id(process_set))
    entry = _REDUCERS.get(key)
    if entry is not None and entry[0] is process_set and _same_groups(entry[1], groups):
        _REDUCERS.move_to_end(key)
        return entry[2]
    reducer = GradientAllreducer(name, device_dense, device_sparse, compression, sparse_as_dense, op,
                                 gradient_predivide_factor, groups, process_set)
    _REDUCERS[key] = (process_set, groups, reducer)
    while len(_REDUCERS) > _MAX_REDUCERS:
        _REDUCERS.popitem(last=False)
    return reducer


def _same_groups(a, b):
    if not isinstance(a, list) or not isinstance(b, list):
        return a == b
    return len(a) == len(b) and all(len(x) == len(y) and all(u is v for u, v in zip(x, y)) for x, y in zip(a, b))
