"""horovod.tensorflow.functions for TF 2.21 / Keras 3: broadcast_variables, broadcast_object,
broadcast_object_fn and allgather_object.

Horovod's broadcast_variables passes the variables into a tf.function as arguments, which turns
Keras 3 variables into read-only tensors; here they are captured instead, so tf.Variable and
keras.Variable both work. The object functions keep Horovod's wire format (a cloudpickle byte
tensor preceded by its size)."""

import collections
import io

import cloudpickle
import numpy as np
import tensorflow as tf

from horovod.common.process_sets import global_process_set

from hvd_herring.tensorflow.mpi_ops import allgather, broadcast, rank

# The broadcast functions of the last few variable lists: tracing one costs more than running it.
_BROADCAST_FUNCTIONS = collections.OrderedDict()
_MAX_CACHED = 8


def _assign_from_root(variables, root_rank, process_set):
    return [var.assign(broadcast(var, root_rank, process_set=process_set)) for var in variables]


def _broadcast_function(variables, root_rank, process_set):
    key = (tuple(id(v) for v in variables), root_rank, process_set.process_set_id)
    entry = _BROADCAST_FUNCTIONS.get(key)
    if entry is not None and all(a is b for a, b in zip(entry[0], variables)):
        _BROADCAST_FUNCTIONS.move_to_end(key)
        return entry[1]
    def assign_all():
        _assign_from_root(variables, root_rank, process_set)

    fn = tf.function(assign_all)
    _BROADCAST_FUNCTIONS[key] = (tuple(variables), fn)
    while len(_BROADCAST_FUNCTIONS) > _MAX_CACHED:
        _BROADCAST_FUNCTIONS.popitem(last=False)
    return fn


def broadcast_variables(variables, root_rank, process_set=global_process_set, inplace=False):
    """Assigns to every variable its value on `root_rank`. Eagerly, all broadcasts of the list run
    at once inside one tf.function; in a graph, returns the op that does it. `inplace` is
    accepted for compatibility (the values are assigned either way)."""
    variables = list(variables)
    if not variables:
        return None if tf.executing_eagerly() else tf.no_op()
    if tf.executing_eagerly():
        _broadcast_function(variables, root_rank, process_set)()
        return None
    return tf.group(*_assign_from_root(variables, root_rank, process_set))


def _to_numpy(value, session):
    if tf.executing_eagerly():
        return value.numpy()
    return (session or tf.compat.v1.get_default_session()).run(value)


def _pickled(obj):
    b = io.BytesIO()
    cloudpickle.dump(obj, b)
    return b.getvalue()


def broadcast_object(obj, root_rank=0, session=None, name=None, process_set=global_process_set):
    """The object on `root_rank` (cloudpickled), on every member."""
    name = name or type(obj).__name__
    if rank() == root_rank:
        payload = tf.convert_to_tensor(bytearray(_pickled(obj)), dtype=tf.uint8)
        _to_numpy(broadcast(tf.constant([payload.shape[0]], tf.int32), root_rank, name + '.sz',
                            process_set=process_set), session)
    else:
        size = _to_numpy(broadcast(tf.constant([0], tf.int32), root_rank, name + '.sz', process_set=process_set),
                         session)
        payload = tf.zeros(int(size[0]), dtype=tf.uint8)
    data = _to_numpy(broadcast(payload, root_rank, name + '.t', process_set=process_set), session)
    if rank() == root_rank:
        return obj
    return cloudpickle.load(io.BytesIO(data.tobytes()))


def broadcast_object_fn(root_rank=0, session=None, name=None, process_set=global_process_set):
    """TF1 sessions: a function broadcasting objects through placeholders built once."""
    name = name or 'broadcast_object_fn'
    sz = tf.compat.v1.placeholder(tf.int32, [1], name='bcast_object_size')
    bcast_size = broadcast(sz, root_rank, name + '.sz', process_set=process_set)
    t = tf.compat.v1.placeholder(tf.uint8, [None], name='bcast_object_data')
    bcast_data = broadcast(t, root_rank, name + '.t', process_set=process_set)
    session = session or tf.compat.v1.get_default_session()

    def _bcast(obj):
        if rank() == root_rank:
            data = np.frombuffer(_pickled(obj), dtype=np.uint8)
            session.run(bcast_size, feed_dict={sz: [len(data)]})
        else:
            size = session.run(bcast_size, feed_dict={sz: [0]})
            data = np.zeros(size, dtype=np.uint8)
        data = session.run(bcast_data, feed_dict={t: data})
        if rank() == root_rank:
            return obj
        return cloudpickle.load(io.BytesIO(data.tobytes()))

    return _bcast


def allgather_object(obj, session=None, name=None, process_set=global_process_set):
    """Every member's object (cloudpickled), as a list in rank order."""
    name = name or type(obj).__name__
    payload = tf.convert_to_tensor(bytearray(_pickled(obj)), dtype=tf.uint8)
    sizes = _to_numpy(allgather(tf.constant([payload.shape[0]], tf.int32), name=name + '.sz',
                                process_set=process_set), session)
    gathered = _to_numpy(allgather(payload, name=name + '.t', process_set=process_set), session)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    return [cloudpickle.load(io.BytesIO(gathered[offsets[i]:offsets[i + 1]].tobytes()))
            for i in range(process_set.size())]
