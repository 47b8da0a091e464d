"""The herring TensorFlow ops: the op library (native/tensorflow, libherring_tensorflow.so) and one
function per op that adds it to the graph or runs it eagerly. The op enqueues into the engine and
completes asynchronously, so no TensorFlow thread waits on the network. hvd_herring.tensorflow.mpi_ops
offers these functions as Horovod's API, with their gradients (op_gradients) registered.

Naming, which is how ranks match their collectives: inside tf.function a collective is named
after its graph node (`name`, or HorovodAllreduce_<tensor name>, with its name scope unless
ignore_name_scope), identical on every rank because tracing is. An eager call uses `name` if
given, otherwise the engine numbers it: ranks must then call collectives in the same order, as in
Horovod.
"""

import re

import tensorflow as tf
from tensorflow.python.framework import auto_control_deps, ops
from tensorflow.python.ops import control_flow_util

from horovod.common.process_sets import global_process_set

from hvd_herring import build_info
from hvd_herring.basics import basics as _basics
from hvd_herring.tensorflow import OP_LIBRARY

Sum, Adasum = _basics.Sum, _basics.Adasum

# The op library is C++ against TensorFlow's: another TensorFlow could crash in it, and there is no
# Python path to fall back to, so it is an error to say, not a library to load.
_BUILT_AGAINST = build_info.mismatch("tensorflow", tf.__version__)
if _BUILT_AGAINST is not None:
    raise ImportError(
        f"hvd_herring: its TensorFlow ops ({OP_LIBRARY}) were built against TensorFlow {_BUILT_AGAINST}, "
        f"but this process runs TensorFlow {tf.__version__}. Install tensorflow-cpu=={_BUILT_AGAINST} "
        "(pip install 'hvd-herring[tensorflow]'), or build hvd_herring from source against this TensorFlow.")
_LIB = tf.load_op_library(OP_LIBRARY)

# The collectives ranks match by name. tf.function's automatic control dependencies chain every
# stateful op without resource inputs in program order, so each collective would wait for the
# previous one to *complete* before it is even enqueued: one network round trip per tensor and
# no fusion. Declared order-insensitive, they still always run, but all at once. (join and
# barrier keep their place in the program order.)
_CONCURRENT_OPS = frozenset((
    "HerringAllreduce", "HerringGroupedAllreduce", "HerringAllgather", "HerringGroupedAllgather",
    "HerringBroadcast", "HerringAlltoall", "HerringReducescatter", "HerringGroupedReducescatter"))
# (A TensorFlow without this table still runs them correctly, one after the other;
# tests/test_tensorflow_ops.py checks that they are fused.)
if hasattr(auto_control_deps, "MUST_RUN_ORDER_INSENSITIVE_STATEFUL_OPS"):
    auto_control_deps.MUST_RUN_ORDER_INSENSITIVE_STATEFUL_OPS = (
        auto_control_deps.MUST_RUN_ORDER_INSENSITIVE_STATEFUL_OPS | _CONCURRENT_OPS)

def _normalize_name(name):
    """Normalizes an operation name to TensorFlow's rules."""
    return re.sub("[^a-zA-Z0-9_]", "_", name)


def _check_not_xla(what):
    """XLA cannot call back into the engine; say so at trace time instead of failing later with
    'unsupported operation'."""
    if not tf.executing_eagerly() and control_flow_util.GraphOrParentsInXlaContext(ops.get_default_graph()):
        raise NotImplementedError(
            f"hvd_herring: {what} cannot run inside an XLA-compiled function (tf.function(jit_compile=True) "
            "or model.compile(jit_compile=True)): its kernel runs on the herring engine, which XLA cannot "
            "call. Compile without jit_compile, or keep the collective outside the compiled function.")


def _naming(prefix, tensors, name, ignore_name_scope):
    """The op arguments that name a collective (see the module docstring), and its engine's."""
    if tf.executing_eagerly():
        return {"auto_name": True, **_engine()} if name is None else {"tensor_name": str(name), **_engine()}
    if name is None:
        if len(tensors) == 1:
            name = f"{prefix}_{_normalize_name(tensors[0].name)}"
        else:
            name = _normalize_name(f"{prefix}_{tensors[0].name}_{tensors[-1].name}")
    return {"name": name, "ignore_name_scope": ignore_name_scope, **_engine()}


def _engine():
    """The attributes by which a herring op finds the engine when it runs (engine_slot.h): a
    reference to hvd_herring.basics' slot, which always holds the engine of the current round, so
    a tf.function traced before an elastic reset uses the engine created after it."""
    slot, owner = _basics.engine_reference()
    return {"engine_slot": slot, "engine_owner": owner}


def _as_tensor(value):
    # Variables (tf and Keras) are read here, so the collective sees a tensor with a graph name.
    return value if isinstance(value, tf.Tensor) else tf.convert_to_tensor(value)


def _as_tensors(values, what):
    tensors = [_as_tensor(v) for v in values]
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) > 1:
        raise ValueError(f"{what}: every tensor of a group must have the same dtype, got "
                         f"{sorted(d.name for d in dtypes)}")
    return tensors


def _reduce_op_code(op, process_set=None):
    if op == Adasum:  # Horovod's conditions; the engine runs it (native/ops/adasum_allreduce.h)
        _basics.check_adasum(process_set)
    return int(op)


def _known_set_id(process_set):
    """The set's id, checked when the op is built (eagerly: at the call), as Horovod's Python layer
    checks it (its process_set.size()): an id the engine does not know raises ValueError here,
    not InvalidArgumentError when the op runs. (Before hvd.init() the op raises Horovod's "not
    initialized" error when it runs, as Horovod's does.)"""
    if _basics.is_initialized():
        _basics._ranks_of(process_set.process_set_id)
    return process_set.process_set_id


# --- allreduce -----------------------------------------------------------------------------------

def _allreduce(tensor, name=None, op=Sum, prescale_factor=1.0, postscale_factor=1.0,
               ignore_name_scope=False, process_set=global_process_set):
    """Reduction of `tensor` over the process set (Sum by default; Average, Min, Max, Product).
    Returns a tensor of the same shape and type."""
    _check_not_xla("allreduce")
    tensor = _as_tensor(tensor)
    return _LIB.herring_allreduce(tensor, reduce_op=_reduce_op_code(op, process_set), prescale_factor=prescale_factor,
                                  postscale_factor=postscale_factor, process_set_id=_known_set_id(process_set),
                                  **_naming("HorovodAllreduce", [tensor], name, ignore_name_scope))


def _grouped_allreduce(tensors, name=None, op=Sum, prescale_factor=1.0, postscale_factor=1.0,
                       ignore_name_scope=False, process_set=global_process_set):
    """Allreduce of a list of tensors (one dtype), negotiated and reduced as one unit."""
    _check_not_xla("grouped_allreduce")
    tensors = _as_tensors(tensors, "grouped_allreduce")
    if not tensors:
        return []
    return _LIB.herring_grouped_allreduce(tensors, reduce_op=_reduce_op_code(op, process_set),
                                          prescale_factor=prescale_factor,
                                          postscale_factor=postscale_factor,
                                          process_set_id=_known_set_id(process_set),
                                          **_naming("HorovodGroupedAllreduce", tensors, name, ignore_name_scope))


# --- allgather -----------------------------------------------------------------------------------

def allgather(tensor, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Concatenation of `tensor` from every member along the first dimension (which may differ
    per rank)."""
    _check_not_xla("allgather")
    tensor = _as_tensor(tensor)
    return _LIB.herring_allgather(tensor, process_set_id=_known_set_id(process_set),
                                  **_naming("HorovodAllgather", [tensor], name, ignore_name_scope))


def grouped_allgather(tensors, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Allgather of a list of tensors (one dtype) as one unit."""
    _check_not_xla("grouped_allgather")
    tensors = _as_tensors(tensors, "grouped_allgather")
    if not tensors:
        return []
    return _LIB.herring_grouped_allgather(tensors, process_set_id=_known_set_id(process_set),
                                          **_naming("HorovodGroupedAllgather", tensors, name, ignore_name_scope))


# --- broadcast -----------------------------------------------------------------------------------

def broadcast(tensor, root_rank, name=None, ignore_name_scope=False, process_set=global_process_set):
    """The value of `tensor` on `root_rank` (a global rank), on every member."""
    _check_not_xla("broadcast")
    tensor = _as_tensor(tensor)
    return _LIB.herring_broadcast(tensor, root_rank=int(root_rank), process_set_id=_known_set_id(process_set),
                                  **_naming("HorovodBroadcast", [tensor], name, ignore_name_scope))


def broadcast_(variables, root_rank, name=None, process_set=global_process_set):
    """Assigns to each variable its value on `root_rank`; returns the new values. (The value is
    broadcast into a new buffer and assigned: the variable's buffer is not reused.)"""
    values = []
    for i, var in enumerate(variables):
        var_name = None if name is None else f"{name}_{i}"
        values.append(var.assign(broadcast(var, root_rank, name=var_name, process_set=process_set)))
    return values


# --- alltoall ------------------------------------------------------------------------------------

def alltoall(tensor, splits=None, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Sends rows splits[i] of `tensor` to member i (an even split when splits is None) and
    returns the rows received, concatenated in member order; with splits, also how many rows
    came from each member."""
    _check_not_xla("alltoall")
    tensor = _as_tensor(tensor)
    splits_ = tf.cast(splits, tf.int32) if splits is not None else tf.constant([], dtype=tf.int32)
    output, received = _LIB.herring_alltoall(tensor, splits_, process_set_id=_known_set_id(process_set),
                                             **_naming("HorovodAlltoall", [tensor], name, ignore_name_scope))
    return (output, received) if splits is not None else output


# --- reducescatter -------------------------------------------------------------------------------

def _reducescatter(tensor, name=None, op=Sum, ignore_name_scope=False, process_set=global_process_set,
                   prescale_factor=1.0, postscale_factor=1.0):
    """Reduction of `tensor` of which member i receives its share of the first dimension (the
    first `rows % size` members get one more row)."""
    _check_not_xla("reducescatter")
    tensor = _as_tensor(tensor)
    return _LIB.herring_reducescatter(tensor, reduce_op=_reduce_op_code(op), prescale_factor=prescale_factor,
                                      postscale_factor=postscale_factor, process_set_id=_known_set_id(process_set),
                                      **_naming("HorovodReducescatter", [tensor], name, ignore_name_scope))


def _grouped_reducescatter(tensors, name=None, op=Sum, ignore_name_scope=False, process_set=global_process_set,
                           prescale_factor=1.0, postscale_factor=1.0):
    """Reducescatter of a list of tensors (one dtype) as one unit."""
    _check_not_xla("grouped_reducescatter")
    tensors = _as_tensors(tensors, "grouped_reducescatter")
    if not tensors:
        return []
    return _LIB.herring_grouped_reducescatter(
        tensors, reduce_op=_reduce_op_code(op), prescale_factor=prescale_factor, postscale_factor=postscale_factor,
        process_set_id=_known_set_id(process_set),
        **_naming("HorovodGroupedReducescatter", tensors, name, ignore_name_scope))


# --- synchronization and topology ops ------------------------------------------------------------

def join():
    """This rank has no more data: until every rank joined, it takes part in the others'
    allreduces with zeros. Returns (a tensor holding) the rank that joined last."""
    _check_not_xla("join")
    return _LIB.herring_join(**_engine())


def barrier(process_set=global_process_set):
    """Completes when every member of the process set reached it."""
    _check_not_xla("barrier")
    return _LIB.herring_barrier(process_set_id=_known_set_id(process_set), **_engine())


def size_op(process_set_id=0, name=None):
    """The number of ranks in the process set, read when the graph runs."""
    return _LIB.herring_size(process_set_id=process_set_id, name=name, **_engine())


def local_size_op(name=None):
    """The number of ranks on this host, read when the graph runs."""
    return _LIB.herring_local_size(name=name, **_engine())


def rank_op(name=None):
    """This process's rank, read when the graph runs."""
    return _LIB.herring_rank(name=name, **_engine())


def local_rank_op(name=None):
    """This process's rank on its host, read when the graph runs."""
    return _LIB.herring_local_rank(name=name, **_engine())


def process_set_included_op(process_set_id=0, name=None):
    """1 if this rank belongs to the process set, 0 if not; -1 before init, -3 for an unknown set
    (Horovod's codes)."""
    return _LIB.herring_process_set_included(process_set_id=process_set_id, name=name, **_engine())
