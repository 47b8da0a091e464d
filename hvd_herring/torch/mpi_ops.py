"""Horovod's torch collectives (the API of horovod.torch.mpi_ops) on the herring engine.

Adapters only enqueue: each function hands tensor addresses to the engine and gets a handle, an
integer naming a native Work (native/bindings/work_handle.h) that keeps the tensors alive and
holds the result; synchronize() waits on it without the GIL.
"""

import torch
import torch.utils.dlpack

from horovod.common.process_sets import ProcessSet, global_process_set, add_process_set, remove_process_set
from horovod.common.process_sets import _setup as _setup_process_sets
from horovod.common.util import get_average_backwards_compatibility_fun
from horovod.torch.compression import Compression

from hvd_herring import _native
from hvd_herring.dtype_groups import split_by_dtype
from hvd_herring.torch import zero_copy as _zero_copy
from hvd_herring.torch.storage_hold import held as _held, hold_storages as _hold_storages, _torch_native
from hvd_herring.basics import HorovodInternalError, basics as _basics, export_basics as _export_basics, horovod_error
from hvd_herring.basics import DTYPES as _DTYPES
from hvd_herring.basics import OP_TYPES as _OP_TYPES
from hvd_herring.engine_front import front as _front
from hvd_herring.torch.dtypes import DTYPE_CODES as _DTYPE_CODES, TORCH_DTYPES as _TORCH_DTYPES

_ALLREDUCE = _OP_TYPES["allreduce"]

# The synchronous collectives of one tensor with the tensors read in C++ (native/torch); None in a
# build without torch's headers (HERRING_TORCH=OFF): read in Python.
if _torch_native is not None:
    _torch_native.set_dtype_codes([(torch.empty(0, dtype=t), code) for t, code in _DTYPE_CODES.items()])

_export_basics(globals())

handle_average_backwards_compatibility = get_average_backwards_compatibility_fun(_basics)
_setup_process_sets(_basics)

# Horovod's handles are integers (its DistributedOptimizer keeps them, tests pass them around):
# handle -> the _native.Work that owns the request (its tensors, outputs, result, engine handles).
_works = {}


def init(*args, **kwargs):
    global _works
    if not _basics.is_initialized():  # a second hvd.init() is a no-op: its handles stay valid
        _works = {}
    _basics.init(*args, **kwargs)
    _setup_process_sets(_basics)


def shutdown(*args, **kwargs):
    return _basics.shutdown(*args, **kwargs)


# --- plumbing ------------------------------------------------------------------------------------

def _dtype_code(tensor):
    name = _TORCH_DTYPES.get(tensor.dtype)
    if name is None:
        raise ValueError(f"Tensor type {tensor.type()} is not supported.")
    return _DTYPES[name]


def _check_device(tensor):
    # is_cpu, not device.type: building the device object costs more than the rest of this check.
    if not tensor.is_cpu:
        raise ValueError(f"hvd_herring reduces CPU tensors; got a tensor on {tensor.device}")


def _input(tensor):
    """The tensor the engine reads: a contiguous view or copy (out-of-place ops accept any layout)."""
    _check_device(tensor)
    return tensor if tensor.is_contiguous() else tensor.contiguous()


def _inplace(tensor):
    _check_device(tensor)
    if not tensor.is_contiguous():
        raise ValueError("Tensor is required to be contiguous.")
    return tensor


def _common_dtype(tensors):
    codes = {_dtype_code(t) for t in tensors}
    if not codes:
        return _DTYPES["uint8"]
    if len(codes) != 1:
        raise ValueError("tensors of a group must all have the same dtype")
    return codes.pop()


def _engine_and_code(tensor):
    code = _DTYPE_CODES.get(tensor.dtype)
    if code is None:
        raise ValueError(f"Tensor type {tensor.type()} is not supported.")
    engine = _front._engine  # read directly on this path; engine() raises the error before init
    if engine is None:
        engine = _basics.engine()
    return engine, code


def _enqueue_one(op_type, name, tensor, output, process_set, op, prescale, postscale, root=-1, keep_alive=None,
                 result=None):
    """The hot path (a gradient's allreduce): one tensor whose output the caller provides, one call
    into the engine, which returns the Work. The Work keeps `keep_alive` (default: both tensors)
    and a hold on their storages. `op` is a reduce op already resolved (never None)."""
    engine, code = _engine_and_code(tensor)
    if keep_alive is None:
        keep_alive = tensor if tensor is output else (tensor, output)
    # storage_hold.held, inlined on this path (a call per gradient): before the addresses are read.
    keep_alive = (keep_alive, _hold_storages(keep_alive))
    try:
        work = engine.enqueue_one_work(keep_alive, result,
                                       _OP_TYPES[op_type], name or "", process_set.process_set_id, code,
                                       op, prescale, postscale, root,
                                       tensor.data_ptr(), output.data_ptr(), tensor.shape)
    except _native.HerringError as e:
        raise horovod_error(e) from e
    handle = work.handle
    _works[handle] = work
    return handle


def _ran_in_cpp(op_code, name, tensor, output, process_set, op, prescale, postscale, root):
    """Runs a synchronous collective of one tensor through hvd_herring._torch_native, which reads
    the tensors in C++; False when that path does not take the call (no module, a tensor it leaves
    to the Python path, whose checks raise Horovod's errors)."""
    if _torch_native is None:
        return False
    try:
        return _torch_native.run_one(_basics.slot_address, tensor, output, op_code, name or "",
                                     process_set.process_set_id, op, prescale, postscale, root) is not None
    except _native.HerringError as e:
        raise horovod_error(e) from e


def _run_one(op_type, name, tensor, output, process_set, op, prescale, postscale, root=-1, result=None):
    """_enqueue_one's synchronous twin (allreduce_, allreduce, broadcast_, broadcast): the calling
    thread runs the cycle itself (HERRING_CALLER_RUNS_CYCLES) and gets `result` back, with no handle
    or Work in between, since nobody else can ever wait on it."""
    op_code = _OP_TYPES[op_type]
    if not _ran_in_cpp(op_code, name, tensor, output, process_set, op, prescale, postscale, root):
        _run_one_in_python(op_code, name, tensor, output, process_set, op, prescale, postscale, root)
    return result


def _run_one_in_python(op_code, name, tensor, output, process_set, op, prescale, postscale, root):
    """_run_one with the tensors read in Python: without hvd_herring._torch_native, or for what it
    leaves to this path (whose checks raise Horovod's errors)."""
    engine, code = _engine_and_code(tensor)
    try:
        engine.run_one(tensor, output, op_code, name or "", process_set.process_set_id, code, op,
                       prescale, postscale, root, tensor.data_ptr(), output.data_ptr(), tensor.shape)
    except _native.HerringError as e:
        raise horovod_error(e) from e


def _enqueue(op_type, name, tensors, outputs, process_set, op=None, prescale=1.0, postscale=1.0,
             root=-1, splits=None, finish=None, result=None):
    """Queues one (possibly grouped) collective; returns its handle. synchronize() returns `result`
    when the outputs are the caller's (finish is None), else finish(capsules, splits, value).
    The Work keeps `tensors` and `outputs`, and a hold on their storages, until then: the engine
    holds their addresses."""
    op = Sum if op is None else op
    if len(tensors) == 1 and splits is None and outputs is not None and finish is None:
        return _enqueue_one(op_type, name, tensors[0], outputs[0], process_set, op, prescale, postscale, root,
                            keep_alive=(tensors, outputs), result=result)
    work = _native.Work(_basics.engine(), _held((tensors, outputs)), result, finish)
    # A group whose tensors differ in dtype runs as one grouped collective per dtype
    # (hvd_herring.dtype_groups, the rule TensorFlow follows too): one Work, a part per dtype.
    if len(tensors) > 1 and splits is None:
        parts = split_by_dtype([_TORCH_DTYPES.get(t.dtype, str(t.dtype)) for t in tensors], name)
    else:
        parts = [(name, range(len(tensors)))]
    # Every part's dtype is checked before the first is queued: a part in flight on its own
    # could never be matched on the other ranks.
    codes = [_common_dtype([tensors[i] for i in positions]) for _, positions in parts]
    for (part_name, positions), code in zip(parts, codes):
        args = []
        for i in positions:
            out = outputs[i] if outputs is not None else None
            args.append((tensors[i].data_ptr(), out.data_ptr() if out is not None else 0,
                         list(tensors[i].shape), list(splits[i]) if splits is not None else []))
        work.add(_basics.enqueue(op_type, part_name, process_set.process_set_id, code, op, prescale, postscale,
                                 root, args), code, list(positions) if len(parts) > 1 else [])
    _works[work.handle] = work
    return work.handle


def _tensors_from(capsules):
    return [torch.utils.dlpack.from_dlpack(c) for c in capsules]


def poll(handle):
    """True once the collective behind `handle` completed (synchronize() will not block)."""
    work = _works.get(handle)
    if work is None:
        raise ValueError(f"unknown handle {handle}")
    return work.poll()


def synchronize(handle):
    """Waits for the collective and returns its output (a tensor, or a list for groups)."""
    work = _works.get(handle)
    if work is None:
        return None
    try:
        out = work.result()  # Ctrl-C or a timeout leaves the handle valid
    except _native.HerringError as e:
        _works.pop(handle, None)  # the request failed: it is over
        raise horovod_error(e) from e
    except BaseException:
        if work.is_completed():  # failed with another error; a timeout or Ctrl-C keeps it pending
            _works.pop(handle, None)
        raise
    _works.pop(handle, None)
    return out


class _NoGradient:
    """The ctx an autograd Function's forward gets from _apply when no gradient can flow: it takes
    the attributes forward sets, which no backward will read."""

    def mark_non_differentiable(self, *tensors):
        pass


def _apply(function, *args):
    """function.apply(*args), skipping autograd's machinery when no input needs a gradient (grad
    mode off, or no tensor with requires_grad): the result is the same, and measured at np=1 on a
    4 KiB tensor, Function.apply took 10 of hvd.allreduce's 15.7 us (a metric averaged each step)."""
    if torch.is_grad_enabled():
        for a in args:  # a loop, not any(): a generator costs a microsecond on this path
            if isinstance(a, torch.Tensor) and a.requires_grad:
                return function.apply(*args)
    return function.forward(_NoGradient(), *args)


# --- allreduce -----------------------------------------------------------------------------------

def _reject_adasum_in_reducescatter(op):
    # Horovod raises a RuntimeError here (NotImplementedError is one); the engine would say
    # ValueError (InvalidArgument) when the request is queued.
    if op == Adasum:
        raise NotImplementedError("Adasum is an allreduce: reducescatter does not take op=Adasum")


def _check_adasum(op, process_set):
    # Horovod's conditions, with its NotImplementedError (a RuntimeError); the engine runs it
    # (native/ops/adasum_allreduce.h).
    if op == Adasum:
        _basics.check_adasum(process_set)


def _allreduce_async(tensor, output, name, op, prescale_factor, postscale_factor, process_set,
                     submit=_enqueue_one):
    """`submit`: _enqueue_one (returns a handle) or _run_one (returns the output)."""
    _check_adasum(op, process_set)
    return submit("allreduce", name, _input(tensor), output, process_set, Sum if op is None else op,
                  prescale_factor, postscale_factor, result=output)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set):
    """Asynchronous average (or sum, min, max, product) of `tensor` over the process set;
    `tensor` is not modified. Returns a handle for poll() / synchronize()."""
    return _allreduce_out_of_place(tensor, average, name, op, prescale_factor, postscale_factor, process_set)


def _allreduce_out_of_place(tensor, average, name, op, prescale_factor, postscale_factor, process_set,
                            submit=_enqueue_one):
    op = handle_average_backwards_compatibility(op, average)
    output = _zero_copy.empty_output_like(tensor)
    return _allreduce_async(tensor, output, name, op, prescale_factor, postscale_factor, process_set, submit)


class HorovodAllreduce(torch.autograd.Function):
    """allreduce as an autograd function: the gradient is allreduced the same way."""

    @staticmethod
    def forward(ctx, tensor, average, name, op, prescale_factor, postscale_factor, process_set):
        ctx.average, ctx.op, ctx.process_set = average, op, process_set
        ctx.prescale_factor, ctx.postscale_factor = prescale_factor, postscale_factor
        return _allreduce_out_of_place(tensor, average, name, op, prescale_factor, postscale_factor, process_set,
                                       submit=_run_one)

    @staticmethod
    def backward(ctx, grad_output):
        return allreduce(grad_output, average=ctx.average, op=ctx.op, prescale_factor=ctx.prescale_factor,
                         postscale_factor=ctx.postscale_factor,
                         process_set=ctx.process_set), None, None, None, None, None, None


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Average (or sum, min, max, product) of `tensor` over the process set, differentiable."""
    # A metric each step (hvd.allreduce(loss)) without a gradient to record: the output is
    # allocated and the tensor read in C++. Measured at np=1, 4 KiB: 4.8 us through the layers
    # below, most of it Python.
    if (_torch_native is not None and compression is Compression.none and average is None and op != Adasum
            and not _zero_copy.in_use()):
        try:
            out = _torch_native.allreduce(_basics.slot_address, tensor, name or "", process_set.process_set_id,
                                          Average if op is None else op, prescale_factor, postscale_factor)
        except _native.HerringError as e:
            raise horovod_error(e) from e
        if out is not None:
            return out
    tensor_compressed, cctx = compression.compress(tensor)
    reduced = _apply(HorovodAllreduce, tensor_compressed, average, name, op, prescale_factor, postscale_factor,
                     process_set)
    return compression.decompress(reduced, cctx)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set):
    """In-place asynchronous allreduce of `tensor`."""
    # One call per gradient (DistributedOptimizer's hooks).
    op = _inplace_allreduce_op(op, average, process_set)
    return _enqueue_one("allreduce", name, _inplace(tensor), tensor, process_set, op, prescale_factor,
                        postscale_factor, result=tensor)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set):
    """In-place allreduce of `tensor`."""
    # A training loop's synchronous call (a metric, a small tensor each step): the tensor is read
    # in C++ (_ran_in_cpp); the op is resolved only when it needs to be.
    if op is None or average is not None or op == Adasum:
        op = _inplace_allreduce_op(op, average, process_set)
    if not _ran_in_cpp(_ALLREDUCE, name, tensor, tensor, process_set, op, prescale_factor, postscale_factor, -1):
        _run_one_in_python(_ALLREDUCE, name, _inplace(tensor), tensor, process_set, op, prescale_factor,
                           postscale_factor, -1)
    return tensor


def _inplace_allreduce_op(op, average, process_set):
    """Horovod's checks of an in-place allreduce's op, without the calls that cost more than the
    checks themselves when an op is given: the op resolved."""
    if op is None or average is not None:
        op = handle_average_backwards_compatibility(op, average)
    if op == Adasum:
        _check_adasum(op, process_set)
    return op


def _grouped_allreduce_async(tensors, outputs, name, op, prescale_factor, postscale_factor, process_set):
    _check_adasum(op, process_set)
    return _enqueue("allreduce", name, [_input(t) for t in tensors], outputs, process_set, op, prescale_factor,
                    postscale_factor, result=list(outputs))


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    """Asynchronous allreduce of a list of tensors, negotiated and reduced as one unit."""
    op = handle_average_backwards_compatibility(op, average)
    outputs = [_zero_copy.empty_output_like(t) for t in tensors]
    return _grouped_allreduce_async(tensors, outputs, name, op, prescale_factor, postscale_factor, process_set)


class HorovodGroupedAllreduce(torch.autograd.Function):
    """grouped_allreduce as an autograd function."""

    @staticmethod
    def forward(ctx, average, name, op, prescale_factor, postscale_factor, process_set, *tensors):
        ctx.average, ctx.op, ctx.process_set = average, op, process_set
        ctx.prescale_factor, ctx.postscale_factor = prescale_factor, postscale_factor
        return tuple(synchronize(grouped_allreduce_async(list(tensors), average, name, op, prescale_factor,
                                                         postscale_factor, process_set)))

    @staticmethod
    def backward(ctx, *grad_output):
        grad_reduced = grouped_allreduce(list(grad_output), average=ctx.average, op=ctx.op,
                                         prescale_factor=ctx.prescale_factor,
                                         postscale_factor=ctx.postscale_factor, process_set=ctx.process_set)
        return (None, None, None, None, None, None, *grad_reduced)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Allreduce of a list of tensors as one unit (never split across fusion buffers or cycles)."""
    compressed, cctxs = zip(*[compression.compress(t) for t in tensors]) if tensors else ((), ())
    reduced = _apply(HorovodGroupedAllreduce, average, name, op, prescale_factor, postscale_factor, process_set,
                     *compressed)
    return [compression.decompress(t, c) for t, c in zip(reduced, cctxs)]


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    """In-place asynchronous grouped allreduce."""
    op = handle_average_backwards_compatibility(op, average)
    tensors = [_inplace(t) for t in tensors]
    return _grouped_allreduce_async(tensors, tensors, name, op, prescale_factor, postscale_factor, process_set)


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set):
    """In-place grouped allreduce."""
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor,
                                                process_set))


def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Sparse gradients: allgather indices and values, as Horovod does. Returns a callable handle."""
    t = tensor
    indices_handle = allgather_async(t._indices().transpose(0, 1).contiguous(), name=f"{name}.indices",
                                     process_set=process_set)
    values_handle = allgather_async(t._values(), name=f"{name}.values", process_set=process_set)

    def handle():
        values = synchronize(values_handle)
        indices = synchronize(indices_handle)
        values = (values / process_set.size()) if op == Average else values
        if indices.dim() == 0 or values.dim() == 0:
            return t.new().resize_as_(t)
        return t.new(indices.transpose(0, 1), values, t.size())

    return handle


# --- allgather -----------------------------------------------------------------------------------

def allgather_async(tensor, name=None, process_set=global_process_set):
    """Asynchronous concatenation of `tensor` from every member along the first dimension (which
    may differ per rank)."""
    return _enqueue("allgather", name, [_input(tensor)], None, process_set,
                    finish=lambda caps, *_: _tensors_from(caps)[0])


class HorovodAllgather(torch.autograd.Function):
    """allgather as an autograd function: the gradient is the averaged slice of this rank."""

    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.dim = tensor.shape[0]
        ctx.process_set = process_set
        return synchronize(allgather_async(tensor, name, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        grad_reduced = allreduce(grad_output, average=True, process_set=ctx.process_set)
        dims = allgather(torch.IntTensor([ctx.dim]), process_set=ctx.process_set).view(ctx.process_set.size())
        r = ctx.process_set.rank()
        offset = torch.sum(dims.narrow(0, 0, r)).item() if r != 0 else 0
        return grad_reduced.narrow(0, offset, ctx.dim), None, None


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenation of `tensor` from every member along the first dimension, differentiable."""
    return _apply(HorovodAllgather, tensor, name, process_set)


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """Asynchronous allgather of a list of tensors as one unit."""
    return _enqueue("allgather", name, [_input(t) for t in tensors], None, process_set,
                    finish=lambda caps, *_: _tensors_from(caps))


class HorovodGroupedAllgather(torch.autograd.Function):
    """grouped_allgather as an autograd function."""

    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        ctx.dims = [t.shape[0] for t in tensors]
        ctx.process_set = process_set
        return tuple(synchronize(grouped_allgather_async(list(tensors), name, process_set)))

    @staticmethod
    def backward(ctx, *grad_output):
        grad_reduced = grouped_allreduce(list(grad_output), average=True, process_set=ctx.process_set)
        dims = [d.view(ctx.process_set.size())
                for d in grouped_allgather([torch.IntTensor([dim]) for dim in ctx.dims],
                                           process_set=ctx.process_set)]
        r = ctx.process_set.rank()
        offsets = [torch.sum(d.narrow(0, 0, r)).item() if r != 0 else 0 for d in dims]
        return (None, None, *[g.narrow(0, o, d) for g, o, d in zip(grad_reduced, offsets, ctx.dims)])


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """Allgather of a list of tensors as one unit, differentiable."""
    return list(_apply(HorovodGroupedAllgather, name, process_set, *tensors))


# --- broadcast -----------------------------------------------------------------------------------

def _broadcast_async(tensor, output, root_rank, name, process_set, submit=_enqueue_one):
    """`submit`: _enqueue_one (returns a handle) or _run_one (returns the output)."""
    return submit("broadcast", name, tensor, output, process_set, Sum, 1.0, 1.0, root=root_rank, result=output)


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Asynchronous broadcast of `tensor` from `root_rank`; `tensor` is not modified."""
    return _broadcast_out_of_place(tensor, root_rank, name, process_set)


def _broadcast_out_of_place(tensor, root_rank, name, process_set, submit=_enqueue_one):
    src = _input(tensor)
    return _broadcast_async(src, torch.empty_like(src), root_rank, name, process_set, submit)


class HorovodBroadcast(torch.autograd.Function):
    """broadcast as an autograd function: the root gets the averaged gradient, others zero."""

    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank = root_rank
        ctx.process_set = process_set
        return _broadcast_out_of_place(tensor, root_rank, name, process_set, submit=_run_one)

    @staticmethod
    def backward(ctx, grad_output):
        grad_reduced = allreduce(grad_output, average=True, process_set=ctx.process_set)
        if rank() != ctx.root_rank:
            grad_reduced *= 0
        return grad_reduced, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Broadcast of `tensor` from `root_rank`, differentiable."""
    return _apply(HorovodBroadcast, tensor, root_rank, name, process_set)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """In-place asynchronous broadcast."""
    return _broadcast_inplace(tensor, root_rank, name, process_set)


def _broadcast_inplace(tensor, root_rank, name, process_set, submit=_enqueue_one):
    t = _inplace(tensor)
    return _broadcast_async(t, t, root_rank, name, process_set, submit)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """In-place broadcast."""
    return _broadcast_inplace(tensor, root_rank, name, process_set, submit=_run_one)


# --- alltoall ------------------------------------------------------------------------------------

def _split_list(splits):
    """alltoall's splits as a list of ints; like Horovod, a tensor of splits must hold int32."""
    if splits is None:
        return []
    if isinstance(splits, torch.Tensor):
        if splits.dtype != torch.int32:
            raise ValueError(f"alltoall splits must be a tensor of 32-bit integers (torch.int32), got {splits.dtype}")
        return [int(s) for s in splits.tolist()]
    if not all(isinstance(s, int) or (hasattr(s, "__index__") and not isinstance(s, float)) for s in splits):
        raise ValueError(f"alltoall splits must be integers, got {list(splits)!r}")
    return [int(s) for s in splits]


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Asynchronous alltoall: rows splits[i] go to member i (even split when splits is None).
    synchronize() returns (output, received_splits)."""
    src = _input(tensor)
    split_list = _split_list(splits)
    return _enqueue("alltoall", name, [src], None, process_set, splits=[split_list],
                    finish=lambda caps, received, _: (_tensors_from(caps)[0],
                                                      torch.tensor(received, dtype=torch.int32)))


class HorovodAlltoall(torch.autograd.Function):
    """alltoall as an autograd function: the gradient travels back along the received splits."""

    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        output, received_splits = synchronize(alltoall_async(tensor, splits, name, process_set))
        ctx.process_set = process_set
        ctx.recvsplits = received_splits
        if splits is None:
            return output
        ctx.mark_non_differentiable(received_splits)
        return output, received_splits

    @staticmethod
    def backward(ctx, grad_output, *dead_gradients):
        grad_wrt_tensor, _ = alltoall(grad_output, splits=ctx.recvsplits, process_set=ctx.process_set)
        return grad_wrt_tensor, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """alltoall; returns output, or (output, received_splits) when splits are given."""
    return _apply(HorovodAlltoall, tensor, splits, name, process_set)


# --- reducescatter -------------------------------------------------------------------------------

def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                        postscale_factor=1.0):
    """Asynchronous reduction over the members, each receiving its slice of the first dimension
    (the first dim % size members get one extra row)."""
    _reject_adasum_in_reducescatter(op)
    return _enqueue("reducescatter", name, [_input(tensor)], None, process_set, op, prescale_factor,
                    postscale_factor, finish=lambda caps, *_: _tensors_from(caps)[0])


class HorovodReducescatter(torch.autograd.Function):
    """reducescatter as an autograd function: the gradient is allgathered."""

    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale_factor, postscale_factor):
        ctx.op, ctx.process_set = op, process_set
        ctx.prescale_factor, ctx.postscale_factor = prescale_factor, postscale_factor
        return synchronize(reducescatter_async(tensor, name, op, process_set, prescale_factor, postscale_factor))

    @staticmethod
    def backward(ctx, grad_output):
        if ctx.op == Sum:
            grad_output = grad_output * ctx.process_set.size()
        if ctx.prescale_factor != 1.0:
            grad_output = grad_output * ctx.prescale_factor
        if ctx.postscale_factor != 1.0:
            grad_output = grad_output * ctx.postscale_factor
        return allgather(grad_output, process_set=ctx.process_set), None, None, None, None, None


def reducescatter(tensor, name=None, compression=Compression.none, op=Average, process_set=global_process_set,
                  prescale_factor=1.0, postscale_factor=1.0):
    """reducescatter, differentiable."""
    tensor_compressed, cctx = compression.compress(tensor)
    reduced = _apply(HorovodReducescatter, tensor_compressed, name, op, process_set, prescale_factor,
                     postscale_factor)
    return compression.decompress(reduced, cctx)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    """Asynchronous reducescatter of a list of tensors as one unit."""
    _reject_adasum_in_reducescatter(op)
    return _enqueue("reducescatter", name, [_input(t) for t in tensors], None, process_set, op,
                    prescale_factor, postscale_factor, finish=lambda caps, *_: _tensors_from(caps))


class HorovodGroupedReducescatter(torch.autograd.Function):
    """grouped_reducescatter as an autograd function."""

    @staticmethod
    def forward(ctx, name, op, process_set, prescale_factor, postscale_factor, *tensors):
        ctx.op, ctx.process_set = op, process_set
        ctx.prescale_factor, ctx.postscale_factor = prescale_factor, postscale_factor
        return tuple(synchronize(grouped_reducescatter_async(list(tensors), name, op, process_set,
                                                             prescale_factor, postscale_factor)))

    @staticmethod
    def backward(ctx, *grad_output):
        scale = 1.0
        if ctx.op == Sum:
            scale *= ctx.process_set.size()
        scale *= ctx.prescale_factor * ctx.postscale_factor
        grads = [g * scale if scale != 1.0 else g for g in grad_output]
        return (None, None, None, None, None, *grouped_allgather(grads, process_set=ctx.process_set))


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """reducescatter of a list of tensors as one unit, differentiable."""
    compressed, cctxs = zip(*[compression.compress(t) for t in tensors]) if tensors else ((), ())
    reduced = _apply(HorovodGroupedReducescatter, name, op, process_set, prescale_factor, postscale_factor,
                     *compressed)
    return [compression.decompress(t, c) for t, c in zip(reduced, cctxs)]


# --- synchronization points ----------------------------------------------------------------------

def join(device=-1) -> int:
    """Declares that this rank has no more data: until every rank joined, it takes part in the
    others' allreduces with zeros. Returns the rank that joined last."""
    return synchronize(_enqueue("join", "join", [], None, global_process_set,
                                finish=lambda caps, splits, last_rank: int(last_rank)))


def barrier(process_set=global_process_set):
    """Blocks until every member of the process set reached the barrier."""
    synchronize(_enqueue("barrier", "", [], None, process_set, result=None))
