"""Horovod's public reductions for TensorFlow: allreduce, grouped_allreduce, reducescatter and
grouped_reducescatter with compression, the `average` compatibility argument and tf.IndexedSlices
(reduced as two allgathers, as Horovod does), on top of the ops in mpi_ops."""

import tensorflow as tf

from horovod.common.process_sets import global_process_set
from horovod.tensorflow.compression import Compression

from hvd_herring.tensorflow import mpi_ops
from hvd_herring.dtype_groups import split_by_dtype
from hvd_herring.tensorflow.mpi_ops import Adasum, Average, Sum, handle_average_backwards_compatibility


def _check_sparse_op(op, prescale_factor, postscale_factor):
    if op == Adasum:
        raise NotImplementedError("Adasum is not supported by the herring backend")
    if op not in (Sum, Average):
        raise NotImplementedError("Only Sum and Average ops are supported with tf.IndexedSlices")
    if prescale_factor != 1.0 or postscale_factor != 1.0:
        raise NotImplementedError("Pre/postscale_factor are not supported with tf.IndexedSlices")


def _gathered_slices(values, indices, like, op, process_set):
    if op == Average:
        values = values / tf.cast(process_set.size(), values.dtype)
    return tf.IndexedSlices(values, indices, dense_shape=like.dense_shape)


def _compressed(collective, tensor, compression, device, **kwargs):
    """`collective` (an op of mpi_ops) of `tensor` compressed on `device`, decompressed."""
    with tf.device(device):
        compressed, ctx = compression.compress(mpi_ops._as_tensor(tensor))
        return compression.decompress(collective(compressed, **kwargs), ctx)


def allreduce(tensor, average=None, device_dense='', device_sparse='', compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, name=None, process_set=global_process_set,
              ignore_name_scope=False):
    """Average (by default), sum, min, max or product of a tf.Tensor, tf.Variable or
    tf.IndexedSlices over the process set. IndexedSlices are allgathered (values and indices)."""
    op = handle_average_backwards_compatibility(op, average)
    if isinstance(tensor, tf.IndexedSlices):
        _check_sparse_op(op, prescale_factor, postscale_factor)
        with tf.device(device_sparse):
            values = mpi_ops.allgather(tensor.values, process_set=process_set, ignore_name_scope=ignore_name_scope,
                                       name=None if name is None else f"{name}.values")
            indices = mpi_ops.allgather(tensor.indices, process_set=process_set, ignore_name_scope=ignore_name_scope,
                                        name=None if name is None else f"{name}.indices")
            return _gathered_slices(values, indices, tensor, op, process_set)
    return _compressed(mpi_ops._allreduce, tensor, compression, device_dense, name=name, op=op,
                       prescale_factor=prescale_factor, postscale_factor=postscale_factor, process_set=process_set,
                       ignore_name_scope=ignore_name_scope)


def grouped_allreduce(tensors, average=None, device_dense='', device_sparse='', compression=Compression.none,
                      op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set,
                      ignore_name_scope=False, name=None):
    """allreduce of a list of tensors as one unit. Dense tensors of one dtype form one grouped
    collective (a group mixing dtypes becomes one per dtype); IndexedSlices are allgathered."""
    if not tensors:
        return tensors
    op = handle_average_backwards_compatibility(op, average)
    results = [None] * len(tensors)
    sparse = [i for i, t in enumerate(tensors) if isinstance(t, tf.IndexedSlices)]
    dense = [i for i, t in enumerate(tensors) if not isinstance(t, tf.IndexedSlices)]
    if sparse:
        _check_sparse_op(op, prescale_factor, postscale_factor)
        with tf.device(device_sparse):
            values = mpi_ops.grouped_allgather([tensors[i].values for i in sparse], process_set=process_set,
                                               ignore_name_scope=ignore_name_scope,
                                               name=None if name is None else f"{name}.values")
            indices = mpi_ops.grouped_allgather([tensors[i].indices for i in sparse], process_set=process_set,
                                                ignore_name_scope=ignore_name_scope,
                                                name=None if name is None else f"{name}.indices")
            for i, v, ix in zip(sparse, values, indices):
                results[i] = _gathered_slices(v, ix, tensors[i], op, process_set)
    if dense:
        with tf.device(device_dense):
            compressed, ctxs = {}, {}
            for i in dense:
                compressed[i], ctxs[i] = compression.compress(mpi_ops._as_tensor(tensors[i]))
            for part_name, positions in split_by_dtype([compressed[i].dtype.name for i in dense], name):
                members = [dense[p] for p in positions]
                reduced = mpi_ops._grouped_allreduce([compressed[i] for i in members], name=part_name, op=op,
                                                     prescale_factor=prescale_factor,
                                                     postscale_factor=postscale_factor, process_set=process_set,
                                                     ignore_name_scope=ignore_name_scope)
                for i, r in zip(members, reduced):
                    results[i] = compression.decompress(r, ctxs[i])
    return results


def reducescatter(tensor, device_dense='', compression=Compression.none, op=Average, name=None,
                  process_set=global_process_set, ignore_name_scope=False, prescale_factor=1.0,
                  postscale_factor=1.0):
    """Average (by default) or sum of `tensor` over the process set, of which each member
    receives its share of the first dimension."""
    return _compressed(mpi_ops._reducescatter, tensor, compression, device_dense, name=name, op=op,
                       process_set=process_set, ignore_name_scope=ignore_name_scope, prescale_factor=prescale_factor,
                       postscale_factor=postscale_factor)


def grouped_reducescatter(tensors, device_dense='', compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0,
                          name=None, ignore_name_scope=False):
    """reducescatter of a list of tensors (one dtype) as one unit."""
    if not tensors:
        return tensors
    with tf.device(device_dense):
        compressed, ctxs = zip(*[compression.compress(mpi_ops._as_tensor(t)) for t in tensors])
        reduced = mpi_ops._grouped_reducescatter(list(compressed), name=name, op=op, process_set=process_set,
                                                 prescale_factor=prescale_factor,
                                                 postscale_factor=postscale_factor,
                                                 ignore_name_scope=ignore_name_scope)
        return [compression.decompress(r, c) for r, c in zip(reduced, ctxs)]
