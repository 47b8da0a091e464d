"""Gradients of the herring collectives, as Horovod defines them for its TensorFlow ops (the
PyTorch side of hvd_herring uses the same definitions):

- allreduce: the gradient is allreduced with the same op and scale factors;
- allgather: the gradient is averaged over the members, and each keeps its own rows;
- broadcast: the gradient is averaged over the members; it is the root's, zero elsewhere;
- alltoall: the gradient travels back along the received splits;
- reducescatter: the gradient is allgathered (times the set's size for Sum, times the scale
  factors).

In a graph, a gradient's collectives are named after the forward op (`<op name>_grad`), not after
the incoming gradient tensor: gradient graphs may differ between ranks in ways that shift tensor
names (the broadcast gradient multiplies by zero on non-root ranks only), the forward op's name
does not.
"""

import tensorflow as tf
from tensorflow.python.framework import ops

from horovod.common.process_sets import _temp_process_set_object

from hvd_herring.basics import basics as _basics
from hvd_herring.tensorflow import op_library


for _op_type in ("HerringSize", "HerringLocalSize", "HerringRank", "HerringLocalRank", "HerringProcessSetIncluded",
                 "HerringJoin", "HerringBarrier"):
    ops.NotDifferentiable(_op_type)


def _process_set(op):
    return _temp_process_set_object(op.get_attr("process_set_id"))


def _grad_name(op, suffix="grad"):
    """The name of a gradient's collective: derived from the forward op in a graph; eagerly the
    engine numbers it (ranks run the backward pass in the same order)."""
    if tf.executing_eagerly():
        return None
    # A GradientTape hands a stand-in for the op without a name; its outputs have the op's.
    forward_name = op.outputs[0].op.name
    return f"{op_library._normalize_name(forward_name)}_{suffix}"


def _reduction_attrs(op):
    return dict(op=op.get_attr("reduce_op"), prescale_factor=op.get_attr("prescale_factor"),
                postscale_factor=op.get_attr("postscale_factor"),
                ignore_name_scope=op.get_attr("ignore_name_scope"), process_set=_process_set(op))


@ops.RegisterGradient("HerringAllreduce")
def _allreduce_grad(op, grad):
    return op_library._allreduce(grad, name=_grad_name(op), **_reduction_attrs(op))


@ops.RegisterGradient("HerringGroupedAllreduce")
def _grouped_allreduce_grad(op, *grads):
    # TensorFlow may hand zero gradients of another dtype for unused outputs: reduce one by one
    # when the dtypes differ (a group has one dtype).
    if len({g.dtype for g in grads}) > 1:
        return [op_library._allreduce(g, name=_grad_name(op, f"grad_{i}"), **_reduction_attrs(op))
                for i, g in enumerate(grads)]
    return op_library._grouped_allreduce(list(grads), name=_grad_name(op), **_reduction_attrs(op))


def _own_rows(grad, x, op, suffix):
    """This member's rows of an allgathered gradient (every member's first dimension of `x` is
    allgathered to find them)."""
    ps, ins = _process_set(op), op.get_attr("ignore_name_scope")
    with tf.device("/cpu:0"):
        d = tf.reshape(tf.shape(x, out_type=tf.int32)[0], [1])
        dims = tf.reshape(op_library.allgather(d, name=_grad_name(op, suffix), ignore_name_scope=ins,
                                               process_set=ps), [ps.size()])
    return tf.split(grad, num_or_size_splits=dims, axis=0)[ps.rank()]


def _averaged(grad, op, suffix="grad"):
    return op_library._allreduce(grad, name=_grad_name(op, suffix), op=_basics.Average,
                                 ignore_name_scope=op.get_attr("ignore_name_scope"), process_set=_process_set(op))


@ops.RegisterGradient("HerringAllgather")
def _allgather_grad(op, grad):
    return _own_rows(_averaged(grad, op), op.inputs[0], op, "grad_dims")


@ops.RegisterGradient("HerringGroupedAllgather")
def _grouped_allgather_grad(op, *grads):
    # One allreduce per gradient: TensorFlow may hand zero gradients of another dtype.
    return [_own_rows(_averaged(g, op, f"grad_{i}"), x, op, f"grad_dims_{i}")
            for i, (g, x) in enumerate(zip(grads, op.inputs))]


@ops.RegisterGradient("HerringBroadcast")
def _broadcast_grad(op, grad):
    reduced = _averaged(grad, op)
    # The same ops on every rank (a multiplication by 1 or 0), so that the names of the tensors
    # created after this one do not depend on the rank.
    return reduced * tf.cast(_basics.rank() == op.get_attr("root_rank"), reduced.dtype)


@ops.RegisterGradient("HerringAlltoall")
def _alltoall_grad(op, grad_wrt_output, grad_wrt_received_splits):
    grad, _ = op_library.alltoall(grad_wrt_output, splits=op.outputs[1], name=_grad_name(op),
                                  ignore_name_scope=op.get_attr("ignore_name_scope"), process_set=_process_set(op))
    return [grad, None]


def _reducescatter_scale(op, process_set):
    scale = 1.0
    if op.get_attr("reduce_op") == _basics.Sum:
        scale *= process_set.size()
    return scale * op.get_attr("prescale_factor") * op.get_attr("postscale_factor")


@ops.RegisterGradient("HerringReducescatter")
def _reducescatter_grad(op, grad):
    ps = _process_set(op)
    scale = _reducescatter_scale(op, ps)
    if scale != 1.0:
        grad = grad * tf.cast(scale, grad.dtype)
    return op_library.allgather(grad, name=_grad_name(op), ignore_name_scope=op.get_attr("ignore_name_scope"),
                                process_set=ps)


@ops.RegisterGradient("HerringGroupedReducescatter")
def _grouped_reducescatter_grad(op, *grads):
    ps = _process_set(op)
    scale = _reducescatter_scale(op, ps)
    if scale != 1.0:
        grads = [g * tf.cast(scale, g.dtype) for g in grads]
    return [op_library.allgather(g, name=_grad_name(op, f"grad_{i}"),
                                 ignore_name_scope=op.get_attr("ignore_name_scope"), process_set=ps)
            for i, g in enumerate(grads)]
