"""HerringProcessGroup: a torch.distributed ProcessGroup (written in Python, on torch's trampoline
class) whose collectives run on this process's herring engine, over one process set.

Group ranks are indices into the process set's sorted global ranks, which is also the order in
which the engine concatenates allgather and alltoall results. Collectives the engine lacks are
composed from its own where that is exact: reduce = allreduce kept by the root; gather = allgather
kept by the root; scatter = alltoall in which only the root sends; reduce_scatter with uneven
pieces = allreduce then this rank's piece. send/recv are the engine's point-to-point transfers."""

import functools
import hashlib

import torch
import torch.distributed as dist
import torch.utils.dlpack
from torch.distributed import ReduceOp
from torch._C._distributed_c10d import AllgatherOptions  # torch.distributed does not re-export it

from hvd_herring import _native
from hvd_herring.engine_front import DTYPES, front
from hvd_herring.torch.dtypes import DTYPE_CODES as _DTYPE_CODES
from hvd_herring.torch.distributed.arguments import (
    as_list, check_allgather, check_allgather_coalesced, check_allreduce, check_allreduce_coalesced, check_broadcast,
    check_cpu, check_gather, check_reduce, check_scatter, invalid, options, reduce_op_of)
from hvd_herring.torch.distributed.naming import collective_name, last_chain
from hvd_herring.torch.distributed.persistent_buffers import persistent_buffers
from hvd_herring.torch.distributed.work import (CompletedWork, EnginePart, HerringWork, TransferPart, _failed, _in_flight,
                                                _seconds, complete_at_once)

_RED = ReduceOp.RedOpType


def _dtype_code(tensor):
    code = _DTYPE_CODES.get(tensor.dtype)
    if code is None:
        raise ValueError(f"herring: {tensor.dtype} tensors are not supported")
    if tensor.device.type != "cpu":
        raise ValueError(f"herring reduces CPU tensors; got a tensor on {tensor.device}")
    return code


def _engine_op(reduce_op, dtype):
    """c10d's ReduceOp -> (the engine's op, prescale). Bool SUM/PRODUCT are OR/AND, as in NCCL."""
    kind = _kind(reduce_op)
    if dtype is not torch.bool:
        op = _ENGINE_OPS_BY_VALUE.get(kind.value)  # the usual ops first, by the enum's integer
        if op is not None:
            return op, 1.0
    if kind == _RED.PREMUL_SUM:
        factor = reduce_op.factor
        return front.Sum, float(factor.item() if isinstance(factor, torch.Tensor) else factor)
    if dtype == torch.bool and kind in (_RED.SUM, _RED.PRODUCT):
        return (front.Max if kind == _RED.SUM else front.Min), 1.0
    op = _ENGINE_OPS.get(kind)
    if op is None:
        raise ValueError(f"herring: ReduceOp {kind} is not supported (SUM, AVG, PRODUCT, MIN, MAX, PREMUL_SUM)")
    return op, 1.0


# Built once: every collective looks its op up here (the dict built per call took a twelfth of
# issuing a 4 KiB dist.all_reduce under cProfile).
_ENGINE_OPS = {_RED.SUM: _native.REDUCE_OPS["Sum"], _RED.AVG: _native.REDUCE_OPS["Average"],
               _RED.PRODUCT: _native.REDUCE_OPS["Product"], _RED.MIN: _native.REDUCE_OPS["Min"],
               _RED.MAX: _native.REDUCE_OPS["Max"]}
# pybind's enums hash and compare slowly (0.45-0.6 us each); their integers do not.
_ENGINE_OPS_BY_VALUE = {kind.value: op for kind, op in _ENGINE_OPS.items()}


def _synchronous(opts):
    """Whether torch waits for the Work at once (asyncOp False: dist.all_reduce(t) and the like
    without async_op): then the waiting thread runs the engine's cycle (Request::waiter_follows).
    Options torch did not fill (DDP's buckets, a direct call) say asyncOp True."""
    return getattr(opts, "asyncOp", True) is False


_BITWISE = {_RED.BAND: torch.bitwise_and, _RED.BOR: torch.bitwise_or, _RED.BXOR: torch.bitwise_xor}
_BITWISE_VALUES = frozenset(kind.value for kind in _BITWISE)


def _kind(reduce_op):
    """c10d's ReduceOp (or a bare RedOpType) -> its RedOpType."""
    return getattr(reduce_op, "op", reduce_op)


def _local_reduce(tensors, reduce_op):
    """gloo's multi-tensor allreduce: this rank's tensors combined first (a new tensor), so that
    the group reduces one. AVG: the mean of equal-sized local means is the mean of all."""
    kind = _kind(reduce_op)
    if kind in _BITWISE:
        return functools.reduce(_BITWISE[kind], [t.contiguous() for t in tensors]).contiguous()
    stacked = torch.stack([t.contiguous() for t in tensors])
    if tensors[0].dtype == torch.bool:
        kind = _RED.MAX if kind == _RED.SUM else _RED.MIN if kind == _RED.PRODUCT else kind
    if kind in (_RED.SUM, _RED.PREMUL_SUM):
        return stacked.sum(0).to(tensors[0].dtype)
    if kind == _RED.AVG:
        return stacked.mean(0).to(tensors[0].dtype)
    if kind == _RED.PRODUCT:
        return stacked.prod(0).to(tensors[0].dtype)
    if kind == _RED.MIN:
        return stacked.amin(0)
    if kind == _RED.MAX:
        return stacked.amax(0)
    raise ValueError(f"herring: ReduceOp {kind} is not supported")


def _copy_pieces(flat, outputs):
    """Consecutive pieces of the 1-D `flat` into `outputs`, in order."""
    offset = 0
    for out in outputs:
        n = out.numel()
        out.copy_(flat[offset:offset + n].view(out.shape))
        offset += n


def _tensors_and_splits(capsules, received_splits, value):
    """A native Work's finish for outputs the engine allocated: its part's value."""
    return [torch.utils.dlpack.from_dlpack(c) for c in capsules], received_splits


def _nothing_to_finish(values):
    """An in-place collective's finish: the engine wrote the caller's tensor."""


def _in_inference_mode(finish):
    def finish_in_inference_mode(values):
        with torch.inference_mode():
            finish(values)
    return finish_in_inference_mode


def _future_layout(output_lists):
    """What gloo's multi-output futures hold: [] for no output list, the list itself for one,
    the lists for several."""
    if not output_lists:
        return []
    return output_lists[0] if len(output_lists) == 1 else output_lists


_DTYPE_NAMES = {code: name for name, code in DTYPES.items()}
_REDUCE_OP_NAMES = {code: name.lower() for name, code in _native.REDUCE_OPS.items()}


def _signature(op_type, dtype_code, reduce_op, root, shapes):
    """What a collective is, for its name (naming.py): the same collective in every step gets the
    same name. Only what every rank has in common: allgather and alltoall inputs may differ in
    their first dimension (and splits) from rank to rank. A group of many tensors is summarised by
    a digest of its shapes."""
    if len(shapes) == 1:
        return _one_tensor_signature(op_type, dtype_code, reduce_op, root, shapes[0])
    return _make_signature(op_type, dtype_code, reduce_op, root, shapes)


def _one_tensor_signature(op_type, dtype_code, reduce_op, root, shape):
    """_signature of one tensor, remembered: a training step asks again and again."""
    # A torch.Size hashes and compares as the tuple it is; making one more costs 0.2 us.
    key = (op_type, dtype_code, reduce_op, root, shape if type(shape) is torch.Size else tuple(shape))
    signature = _ONE_TENSOR_SIGNATURES.get(key)
    if signature is None:
        if len(_ONE_TENSOR_SIGNATURES) >= _SIGNATURES_REMEMBERED:
            _ONE_TENSOR_SIGNATURES.clear()  # shapes that vary without end: start afresh
        signature = _ONE_TENSOR_SIGNATURES[key] = _make_signature(op_type, dtype_code, reduce_op, root, [shape])
    return signature


_ONE_TENSOR_SIGNATURES = {}
_SIGNATURES_REMEMBERED = 4096


def _make_signature(op_type, dtype_code, reduce_op, root, shapes):
    ragged = op_type in ("allgather", "alltoall")
    shapes = [("*",) + tuple(shape[1:]) if ragged else tuple(shape) for shape in shapes]
    if len(shapes) == 1:
        what = "x".join(map(str, shapes[0])) or "scalar"
    else:
        what = f"{len(shapes)}t.{hashlib.blake2b(repr(shapes).encode(), digest_size=6).hexdigest()}"
    signature = f"{op_type}.{_DTYPE_NAMES[dtype_code]}.{what}"
    if op_type in ("allreduce", "reducescatter"):
        signature += f".{_REDUCE_OP_NAMES[reduce_op]}"
    return signature + (f".root{root}" if root >= 0 else "")


def _flat(tensor):
    """A contiguous 1-D view (or copy) of `tensor`, for the engine to read."""
    return tensor.reshape(-1) if tensor.is_contiguous() else tensor.contiguous().view(-1)


class HerringProcessGroup(dist.ProcessGroup):
    def __init__(self, rank, size, process_set_id, global_ranks, timeout_seconds, group_name="", store=None):
        super().__init__(rank, size)
        self._set = int(process_set_id)
        self._store = store                       # the group's c10d Store: shrink re-forms the survivors through it
        self._made_on = front.epoch               # the engine this group runs on (shrink.py starts another)
        self._ranks = list(global_ranks)          # global rank of every group rank
        self._timeout = timeout_seconds
        self._label = group_name
        self._desc = ""
        self._sequence = 0                        # collectives issued on this group (c10d's sequence number)

    # --- identity ------------------------------------------------------------------------------
    def getBackendName(self):
        return "herring"

    # ProcessGroup keeps these in its backend, which a Python group does not have: keep them here.
    def getGroupName(self):
        return self._label

    def setGroupName(self, name):
        self._label = name

    def getGroupDesc(self):
        return self._desc

    def setGroupDesc(self, desc):
        self._desc = desc

    def name(self):
        return "herring"

    # c10d's sequence numbers: every member counts the collectives of the group from the same 0,
    # in issue order, so equal numbers name the same collective on every rank (what gloo's
    # _set_sequence_number_for_group reaches through the store).
    def _get_sequence_number_for_group(self):
        return self._sequence

    def _set_sequence_number_for_group(self):
        pass

    def shutdown(self):
        """destroy_process_group() calls it on every group. The default group of an engine torch
        started takes this rank out of the job, in order: the other ranks go on, their
        collectives in process sets without it keep working (native engine/departures.cc). A
        group of an engine shrink_group replaced has nothing left to shut down."""
        if getattr(self, "_leaves_job", False) and front.is_initialized() and not self._stale():
            from hvd_herring.torch.distributed import rendezvous
            rendezvous.subgroup_sets.clear()  # the next engine numbers its sets anew
            front.leave()

    def abort(self):
        """c10d's Backend.abort() (torch's _abort_process_group; torchft aborts a group that lost a
        member): this rank stops taking part at once. Every group of this process runs on its one
        engine, so the engine fails the job with that cause on every rank and shuts down here: each
        Work in flight, here and on the other ranks, fails now with an error that names the abort,
        instead of waiting for its timeout. A group of an engine shrink_group replaced (torch aborts
        the old groups while it shrinks the default one) leaves the new engine alone."""
        if front.is_initialized() and not self._stale():
            from hvd_herring.torch.distributed import rendezvous
            rendezvous.subgroup_sets.clear()  # the next engine numbers its sets anew
            front.abort(f"rank {front.rank()} aborted process group {self._label!r} (ProcessGroup.abort)")

    # --- shrink_group (shrink.py) ----------------------------------------------------------------
    supports_shrinking = True

    def shrink(self, ranks_to_exclude, shrink_flags=0, opts=None):
        """c10d's Backend.shrink, called by torch.distributed.shrink_group on the survivors: a group
        of the members not in `ranks_to_exclude` (group ranks) on a new engine among them; torch
        makes it the new default group when this one was. What this group's engine still runs
        fails at once (SHRINK_ABORT; SHRINK_DEFAULT alike, the old engine cannot go on)."""
        from hvd_herring.torch.distributed import shrink
        rank, size = shrink.restart_among_survivors(self, ranks_to_exclude, shrink_flags)
        timeout = self._timeout
        seconds = _seconds(getattr(opts, "timeout", None)) if opts is not None else None
        group = HerringProcessGroup(rank, size, 0, list(range(size)), timeout if seconds is None else seconds,
                                    self._label, store=self._store)
        group._leaves_job = True  # the new engine's one group: destroying it takes this rank out in order
        return group

    def _stale(self):
        return self._made_on != front.epoch

    def _stale_error(self, op):
        return dist.DistBackendError(
            f"herring: rank {front.rank() if front.is_initialized() else '?'}: {self._what(op)}: this group was made "
            f"on an engine that shrink_group replaced (engine {self._made_on}, now {front.epoch}); use the group "
            "shrink_group returned, or groups made after it")

    def _get_backend(self, device):
        """A Python group is its own backend (torch's DummyProcessGroup does the same): code that
        asks a group for its CPU backend gets this group."""
        if torch.device(device).type != "cpu":
            raise RuntimeError(f"No backend type associated with device type {torch.device(device).type}")
        return self

    @property
    def process_set_id(self):
        return self._set

    def _what(self, op):
        return f"{op} on herring process group {self._label!r} (process set {self._set})"

    # --- plumbing ------------------------------------------------------------------------------
    def _timeout_of(self, opts):
        seconds = _seconds(getattr(opts, "timeout", None))
        return self._timeout if seconds is None else seconds

    def _enqueue(self, op_type, entries, dtype_code, reduce_op=None, prescale=1.0, root=-1, opts=None):
        """entries: [(input tensor, output tensor or None, splits or None)] -> the request's part
        (its native Work holds the entries' tensors until its result is taken). An output None is
        allocated by the engine: the part's value is then (tensors, received splits). A
        synchronous call's (_synchronous(opts)) waiting thread runs the cycle, as hvd.allreduce_'s
        does, instead of waking the engine's loop for it: dist.all_reduce of 4 KiB at np=2, back to
        back, measured 48-60 -> 42-44 us per call (3 interleaved launches each)."""
        reduce_op = front.Sum if reduce_op is None else reduce_op
        if self._made_on != front._epoch:  # one attribute compare per collective (the property costs a call)
            raise self._stale_error(op_type)
        try:
            if len(entries) == 1 and entries[0][2] is None:
                # One tensor without splits, most collectives: the engine's one-tensor call, without
                # building and converting a list of tuples.
                i, o, _ = entries[0]
                shape = i.shape
                name = collective_name(self._set, _one_tensor_signature(op_type, dtype_code, reduce_op, root, shape))
                if o is None:
                    return EnginePart(front.enqueue_one_work(entries, None, op_type, name, self._set, dtype_code,
                                                             reduce_op, prescale, 1.0, root, i.data_ptr(), 0, shape,
                                                             _tensors_and_splits, True, _synchronous(opts)))
                return EnginePart(front.enqueue_one_work(entries, None, op_type, name, self._set, dtype_code, reduce_op,
                                                         prescale, 1.0, root, i.data_ptr(), o.data_ptr(), shape,
                                                         None, True, _synchronous(opts)))
            args = [(i.data_ptr(), 0 if o is None else o.data_ptr(), list(i.shape), list(s) if s else [])
                    for i, o, s in entries]
            name = collective_name(self._set, _signature(op_type, dtype_code, reduce_op, root, [a[2] for a in args]))
            work = front.work(entries, None, _tensors_and_splits if any(o is None for _, o, _ in entries) else None)
            work.add(front.enqueue(op_type, name, self._set, dtype_code, reduce_op, prescale, 1.0, root, args,
                                   in_program_order=True, waiter_follows=_synchronous(opts)), dtype_code)
            return EnginePart(work)
        except _native.HerringError as e:  # the engine failed already (a lost rank): torch's error type
            raise _failed(self._what(op_type), e) from e

    def _work(self, op, parts, finish, result, opts, keep_alive):
        self._sequence += 1
        if torch.is_inference_mode_enabled():
            # The results are written by whichever thread completes the Work (a settler, for a
            # future): in inference mode if the caller was, as inference tensors demand.
            finish = _in_inference_mode(finish)
        if _synchronous(opts) and _in_flight.nothing_pending_in(self._set):
            # torch waits for it at once, on this thread: complete it here, without a pending Work.
            return complete_at_once(self._what(op), parts, finish, result, self._timeout_of(opts), keep_alive,
                                    last_chain(), self._set)
        return HerringWork(self._what(op), parts, finish, result, self._timeout_of(opts), keep_alive,
                           chain=last_chain(), ordered_in=self._set)

    def _by_dtype(self, tensors):
        if len(tensors) == 1:
            return [[0]]
        groups = {}
        for i, t in enumerate(tensors):
            groups.setdefault(t.dtype, []).append(i)
        return list(groups.values())

    # --- allreduce -----------------------------------------------------------------------------
    def allreduce(self, tensors, opts=None, op=None):
        """allreduce(tensors, opts) | allreduce(tensors, op) | allreduce(tensor, op=SUM). Several
        tensors are ONE reduction, as on gloo: every tensor gets the reduction of all of them."""
        if type(opts) is dist.AllreduceOptions and type(tensors) is list and len(tensors) == 1:
            done = self._allreduce_one_now(tensors, opts)
            if done is not None:
                return done
        tensors = as_list(tensors)
        opts = options(dist.AllreduceOptions, opts, reduceOp=reduce_op_of(opts, op))
        sparse = check_allreduce(tensors, opts.reduceOp)
        check_cpu("allreduce", tensors)
        if sparse:
            return self._sparse_allreduce(tensors, opts)
        if len(tensors) == 1:
            return self._allreduce(tensors, opts.reduceOp, opts, "allreduce")
        scratch = _local_reduce(tensors, opts.reduceOp)
        part, reduced = self._reduce_into(scratch, opts.reduceOp)

        def finish(values):
            reduced(values[0])
            for t in tensors:
                t.copy_(scratch)

        return self._work("allreduce", [part], finish, tensors, opts, [scratch])

    def _allreduce_one_now(self, tensors, opts):
        """dist.all_reduce(t) without async_op, the common case: one dense contiguous CPU tensor
        and an arithmetic op. Issued and completed by the general path's own steps (_enqueue,
        _work), without its normalisation of the arguments: each of torch's attributes costs
        0.05-0.25 us, and the general path read some of them several times (12.8 -> 9.8 us per
        dist.all_reduce of 4 KiB at np=1). None: not that case."""
        t = tensors[0]
        if opts.asyncOp is not False or not t.is_cpu or t.is_sparse or not t.is_contiguous():
            return None
        dtype = t.dtype
        code = _DTYPE_CODES.get(dtype)
        op = _ENGINE_OPS_BY_VALUE.get(_kind(opts.reduceOp).value)
        if code is None or op is None or dtype is torch.bool:
            return None
        persistent_buffers.visit(t)  # may move it into zero-copy memory: before its address is taken
        part = self._enqueue("allreduce", [(t, t, None)], code, op, opts=opts)
        return self._work("allreduce", [part], _nothing_to_finish, tensors, opts, tensors)

    def allreduce_coalesced(self, tensors, opts=None):
        tensors = as_list(tensors)
        opts = options(dist.AllreduceCoalescedOptions, opts, reduceOp=reduce_op_of(opts, None))
        check_allreduce_coalesced(tensors)
        check_cpu("allreduce_coalesced", tensors)
        return self._allreduce(tensors, opts.reduceOp, opts, "allreduce_coalesced")

    def _allreduce(self, tensors, reduce_op, opts, what):
        """Each tensor reduced on its own (one grouped request per dtype)."""
        if not tensors:
            return CompletedWork(tensors, what)
        parts, finishes, copies_back, keep = [], [], [], []
        bitwise = _kind(reduce_op).value in _BITWISE_VALUES
        for positions in self._by_dtype(tensors):  # one grouped request per dtype, as a fusion buffer holds one
            group = [tensors[i] for i in positions]
            entries = []
            for t in group:
                buf = t if t.is_contiguous() else t.contiguous()
                if buf is not t:
                    copies_back.append((t, buf))
                elif not bitwise:
                    persistent_buffers.visit(t)  # may move it into zero-copy memory: before its address is taken
                entries.append((buf, buf, None))
                keep.append(buf)
            if bitwise:  # no engine op: allgathered, reduced here (exact for integers and bools)
                for buf, _, _ in entries:
                    part, reduced = self._reduce_into(buf, reduce_op)
                    parts.append(part)
                    finishes.append(reduced)
            else:
                op, prescale = _engine_op(reduce_op, group[0].dtype)
                parts.append(self._enqueue("allreduce", entries, _dtype_code(group[0]), op, prescale, opts=opts))
                finishes.append(lambda value: None)

        def finish(values):
            for reduced, value in zip(finishes, values):
                reduced(value)
            for t, buf in copies_back:
                t.copy_(buf)

        return self._work(what, parts, finish, tensors, opts, keep)

    def _reduce_into(self, buf, reduce_op):
        """One reduction of the contiguous `buf` in place -> (part, finish(value)). BAND/BOR/BXOR
        (integers and bools) have no engine op: the pieces are allgathered and combined here, in
        group-rank order, which is exact."""
        kind = _kind(reduce_op)
        if kind in _BITWISE:
            if buf.dtype.is_floating_point or buf.dtype.is_complex:
                raise invalid("allreduce", f"Cannot use ReduceOp.{kind.name} with non-integral dtype {buf.dtype}")
            code = _dtype_code(buf)
            flat = buf.view(-1)
            part = self._enqueue("allgather", [(flat, None, None)], code)
            size = self.size()

            def combine(value):
                gathered, _ = value
                rows = gathered[0].view(size, -1).unbind(0)
                flat.copy_(functools.reduce(_BITWISE[kind], rows))

            return part, combine
        op, prescale = _engine_op(reduce_op, buf.dtype)
        return self._enqueue("allreduce", [(buf, buf, None)], _dtype_code(buf), op, prescale), (lambda value: None)

    def _sparse_allreduce(self, tensors, opts):
        """Sparse COO SUM as gloo does it: every rank's indices and values are allgathered, and the
        sum is assembled (and coalesced) here, then copied into every input (DDP reads the result
        from the future)."""
        local = (tensors[0] if len(tensors) == 1 else functools.reduce(torch.add, tensors)).coalesce()
        indices = local._indices().t().contiguous()    # nnz x sparse_dim
        values = local._values().contiguous()          # nnz x dense sizes
        sparse_dim, dense_shape, shape = local.sparse_dim(), list(values.shape[1:]), local.shape
        index_parts, _, index_keep = self._allgather_flat([indices], lambda gathered: None)
        value_parts, _, value_keep = self._allgather_flat([values], lambda gathered: None)

        def finish(values_of_parts):
            (gathered_indices, _), (gathered_values, _) = values_of_parts
            summed = torch.sparse_coo_tensor(gathered_indices[0].view(-1, sparse_dim).t(),
                                             gathered_values[0].view([-1] + dense_shape), shape).coalesce()
            for t in tensors:
                t.copy_(summed)

        return self._work("allreduce (sparse)", index_parts + value_parts, finish, tensors, opts,
                          index_keep + value_keep)

    # --- broadcast -----------------------------------------------------------------------------
    def broadcast(self, tensors, opts=None, root=None):
        """broadcast(tensors, opts) | broadcast(tensor, root). The root's tensors[rootTensor] goes
        into every tensor of every rank, as on gloo."""
        if isinstance(opts, int):
            root, opts = opts, None
        tensors = as_list(tensors)
        opts = options(dist.BroadcastOptions, opts, rootRank=root)
        check_broadcast(tensors, opts, self.size())
        check_cpu("broadcast", tensors)
        source = tensors[opts.rootTensor]
        buf = source if source.is_contiguous() else source.contiguous()
        part = self._enqueue("broadcast", [(buf, buf, None)], _dtype_code(buf), root=self._ranks[opts.rootRank],
                             opts=opts)

        def finish(values):
            if buf is not source:
                source.copy_(buf)
            for t in tensors:
                if t is not source:
                    t.copy_(source)

        return self._work("broadcast", [part], finish, tensors, opts, [buf])

    # --- allgather -----------------------------------------------------------------------------
    def _allgather_flat(self, inputs, finish_with):
        """Allgathers the flattened `inputs` (one grouped request); finish_with(gathered) gets, per
        input, the concatenation of every member's piece in group-rank order."""
        flats = [_flat(t) for t in inputs]
        code = _dtype_code(inputs[0])
        part = self._enqueue("allgather", [(f, None, None) for f in flats], code)

        def finish(values):
            gathered, _ = values[0]
            finish_with(gathered)

        return [part], finish, flats

    def allgather(self, output_lists, inputs, opts=None):
        """allgather(output_lists, inputs, opts) | allgather(outputs, input). As on gloo, every
        output list receives every member's inputs, member after member."""
        if isinstance(inputs, torch.Tensor):
            inputs, output_lists = [inputs], [list(output_lists)]
        inputs, output_lists = list(inputs), [list(outputs) for outputs in output_lists]
        opts = options(AllgatherOptions, opts)
        check_allgather(output_lists, inputs, self.size())
        check_cpu("allgather", inputs)
        flat = _flat(inputs[0]) if len(inputs) == 1 else torch.cat([_flat(t) for t in inputs])

        def copy_out(gathered):
            for outputs in output_lists:
                _copy_pieces(gathered[0], outputs)

        parts, finish, keep = self._allgather_flat([flat], copy_out)
        return self._work("allgather", parts, finish, _future_layout(output_lists), opts, keep)

    def all_gather_single(self, output, input, opts=None):
        opts = options(AllgatherOptions, opts)
        if output.numel() != input.numel() * self.size():
            raise invalid("_allgather_base", f"output tensor size must be equal to world_size times input tensor "
                                             f"size ({output.numel()} != {self.size()} x {input.numel()})")

        def copy_out(gathered):
            output.copy_(gathered[0].view(output.shape))

        parts, finish, keep = self._allgather_flat([input], copy_out)
        return self._work("all_gather_single", parts, finish, [output], opts, keep)

    _allgather_base = all_gather_single

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        opts = options(AllgatherOptions, opts)
        outputs, inputs = list(outputs), list(inputs)
        for i, (out, inp) in enumerate(zip(outputs, inputs)):
            if out.numel() != inp.numel() * self.size():
                raise invalid("allgather_into_tensor_coalesced",
                              f"output tensor {i} must hold world_size times input tensor {i} "
                              f"({out.numel()} != {self.size()} x {inp.numel()})")
        all_parts, finishes, keep = [], [], []
        for positions in self._by_dtype(inputs):
            def copy_out(gathered, positions=positions):
                for i, flat in zip(positions, gathered):
                    outputs[i].copy_(flat.view(outputs[i].shape))
            parts, finish, flats = self._allgather_flat([inputs[i] for i in positions], copy_out)
            all_parts += parts
            finishes.append(finish)
            keep += flats

        def finish_all(values):
            for finish, value in zip(finishes, values):
                finish([value])

        return self._work("all_gather_single_coalesced", all_parts, finish_all, outputs, opts, keep)

    allgather_into_tensor_coalesced = all_gather_single_coalesced

    def allgather_coalesced(self, output_lists, inputs, opts=None):
        """output_lists[m][i] receives input i of member m."""
        opts = options(AllgatherOptions, opts)
        inputs, output_lists = list(inputs), [list(outputs) for outputs in output_lists]
        check_allgather_coalesced(output_lists, inputs, self.size())
        check_cpu("allgather_coalesced", inputs)
        all_parts, finishes, keep = [], [], []
        for positions in self._by_dtype(inputs):
            flat = torch.cat([_flat(inputs[i]) for i in positions])

            def copy_out(gathered, positions=positions):
                pieces = [[outputs[i] for i in positions] for outputs in output_lists]  # member-major
                _copy_pieces(gathered[0], [t for member in pieces for t in member])

            parts, finish, flats = self._allgather_flat([flat], copy_out)
            all_parts += parts
            finishes.append(finish)
            keep += flats

        def finish_all(values):
            for finish, value in zip(finishes, values):
                finish([value])

        return self._work("allgather_coalesced", all_parts, finish_all, _future_layout(output_lists), opts, keep)

    # --- reduce_scatter ------------------------------------------------------------------------
    def _reduce_scatter_flat(self, inputs, reduce_op, copy_out):
        """Reduce-scatters 1-D `inputs` whose lengths are multiples of the group size (one grouped
        request): member m gets elements [m*n, (m+1)*n) of the reduction."""
        code = _dtype_code(inputs[0])
        op, prescale = _engine_op(reduce_op, inputs[0].dtype)
        part = self._enqueue("reducescatter", [(f, None, None) for f in inputs], code, op, prescale)

        def finish(values):
            pieces, _ = values[0]
            copy_out(pieces)

        return part, finish

    def reduce_scatter_single(self, output, input, opts=None):
        opts = options(dist.ReduceScatterOptions, opts)
        if input.numel() != output.numel() * self.size():
            raise invalid("reduce_scatter_tensor", f"input tensor must be the same size as output size times world "
                                                   f"size ({input.numel()} != {output.numel()} x {self.size()})")
        flat = _flat(input)
        part, finish = self._reduce_scatter_flat([flat], opts.reduceOp,
                                                 lambda pieces: output.copy_(pieces[0].view(output.shape)))
        return self._work("reduce_scatter_single", [part], finish, [output], opts, [flat])

    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        opts = options(dist.ReduceScatterOptions, opts)
        outputs, inputs = list(outputs), list(inputs)
        parts, finishes, keep = [], [], []
        for positions in self._by_dtype(inputs):
            flats = [_flat(inputs[i]) for i in positions]

            def copy_out(pieces, positions=positions):
                for i, piece in zip(positions, pieces):
                    outputs[i].copy_(piece.view(outputs[i].shape))

            part, finish = self._reduce_scatter_flat(flats, opts.reduceOp, copy_out)
            parts.append(part)
            finishes.append(finish)
            keep += flats

        def finish_all(values):
            for finish, value in zip(finishes, values):
                finish([value])

        return self._work("reduce_scatter_single_coalesced", parts, finish_all, outputs, opts, keep)

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    def reduce_scatter(self, outputs, input_lists, opts=None, op=None):
        """reduce_scatter(outputs, input_lists, opts) | reduce_scatter(output, inputs, op=SUM)."""
        if isinstance(outputs, torch.Tensor):
            outputs, input_lists = [outputs], [list(input_lists)]
        opts = options(dist.ReduceScatterOptions, opts, reduceOp=reduce_op_of(opts, op))
        outputs = list(outputs)
        for out, pieces in zip(outputs, input_lists):
            if len(pieces) != self.size():
                raise invalid("reduce_scatter", f"requires input list of size {self.size()} (got {len(pieces)})")
        parts, finishes, keep = [], [], []
        for out, pieces in zip(outputs, input_lists):
            flat = torch.cat([_flat(p) for p in pieces])
            keep.append(flat)
            sizes = [p.numel() for p in pieces]
            if len(set(sizes)) == 1:
                part, finish = self._reduce_scatter_flat(
                    [flat], opts.reduceOp, lambda got, out=out: out.copy_(got[0].view(out.shape)))
            else:  # uneven pieces: the engine's split would differ; reduce all, keep ours (exact)
                start = sum(sizes[:self.rank()])
                part, reduced = self._reduce_into(flat, opts.reduceOp)

                def finish(values, out=out, flat=flat, start=start, reduced=reduced):
                    reduced(values[0])
                    out.copy_(flat[start:start + out.numel()].view(out.shape))
            parts.append(part)
            finishes.append(finish)

        def finish_all(values):
            for finish, value in zip(finishes, values):
                finish([value])

        return self._work("reduce_scatter", parts, finish_all, outputs, opts, keep)

    # --- alltoall ------------------------------------------------------------------------------
    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        opts = options(dist.AllToAllOptions, opts)
        src = input if input.is_contiguous() else input.contiguous()
        if src.dim() == 0:
            src = src.view(1)
        splits = list(input_split_sizes) if input_split_sizes else [src.shape[0] // self.size()] * self.size()
        code = _dtype_code(src)
        part = self._enqueue("alltoall", [(src, None, splits)], code)

        def finish(values):
            received, _ = values[0]
            output.copy_(received[0].view(output.shape))

        return self._work("all_to_all_single", [part], finish, [output], opts, [src])

    alltoall_base = all_to_all_single

    def alltoall(self, outputs, inputs, opts=None):
        opts = options(dist.AllToAllOptions, opts)
        outputs, inputs = list(outputs), list(inputs)
        flat = torch.cat([_flat(t) for t in inputs]) if inputs else torch.empty(0)
        code = _dtype_code(flat)
        part = self._enqueue("alltoall", [(flat, None, [t.numel() for t in inputs])], code)

        def finish(values):
            received, _ = values[0]
            _copy_pieces(received[0], outputs)

        return self._work("alltoall", [part], finish, outputs, opts, [flat])

    # --- rooted collectives, composed ---------------------------------------------------------
    def reduce(self, tensors, opts=None, root=None, op=None):
        """reduce(tensors, opts) | reduce(tensor, root, op=SUM)."""
        if isinstance(opts, int):
            root, opts = opts, None
        tensors = as_list(tensors)
        opts = options(dist.ReduceOptions, opts, rootRank=root, reduceOp=reduce_op_of(opts, op))
        check_reduce(tensors, opts, self.size())
        check_cpu("reduce", tensors)
        tensor = tensors[opts.rootTensor]
        scratch = tensor.contiguous().clone()  # non-roots keep their input, as gloo does
        part, reduced = self._reduce_into(scratch, opts.reduceOp)
        is_root = self.rank() == opts.rootRank

        def finish(values):
            reduced(values[0])
            if is_root:
                tensor.copy_(scratch)

        return self._work("reduce", [part], finish, tensors, opts, [scratch])

    def gather(self, output_lists, inputs, opts=None, root=None):
        """gather(output_lists, inputs, opts) | gather(outputs, input, root). The future holds the
        root's output list ([] elsewhere), as on gloo."""
        if isinstance(opts, int):
            root, opts = opts, None
        if isinstance(inputs, torch.Tensor):
            inputs, output_lists = [inputs], [list(output_lists)]
        inputs, output_lists = list(inputs), [list(outputs) for outputs in output_lists]
        opts = options(dist.GatherOptions, opts, rootRank=root)
        is_root = self.rank() == opts.rootRank
        if not is_root and output_lists == [[]]:
            output_lists = []  # the convenience form on a non-root
        check_gather(output_lists, inputs, opts.rootRank, self.rank(), self.size())
        check_cpu("gather", inputs)

        def copy_out(gathered):
            if is_root:
                _copy_pieces(gathered[0], output_lists[0])

        parts, finish, keep = self._allgather_flat(inputs, copy_out)
        return self._work("gather", parts, finish, _future_layout(output_lists), opts, keep)

    def scatter(self, outputs, input_lists, opts=None, root=None):
        """scatter(outputs, input_lists, opts) | scatter(output, inputs, root)."""
        if isinstance(opts, int):
            root, opts = opts, None
        if isinstance(outputs, torch.Tensor):
            outputs, input_lists = [outputs], [list(input_lists)]
        outputs, input_lists = list(outputs), [list(inputs) for inputs in input_lists]
        opts = options(dist.ScatterOptions, opts, rootRank=root)
        is_root = self.rank() == opts.rootRank
        if not is_root and input_lists == [[]]:
            input_lists = []  # the convenience form on a non-root
        check_scatter(outputs, input_lists, opts.rootRank, self.rank(), self.size())
        check_cpu("scatter", outputs)
        out = outputs[0]
        n = self.size()
        if is_root:
            flat = torch.cat([_flat(t) for t in input_lists[0]])
            splits = [t.numel() for t in input_lists[0]]
        else:
            flat = torch.empty(0, dtype=out.dtype)
            splits = [0] * n
        code = _dtype_code(out)
        part = self._enqueue("alltoall", [(flat, None, splits)], code)

        def finish(values):
            received, _ = values[0]
            out.copy_(received[0].view(out.shape))

        return self._work("scatter", [part], finish, outputs, opts, [flat])

    def barrier(self, opts=None):
        opts = opts if opts is not None else dist.BarrierOptions()
        if self._stale():
            raise self._stale_error("barrier")
        try:
            work = front.work((), None, None)
            work.add(front.enqueue("barrier", collective_name(self._set, "barrier"), self._set, DTYPES["uint8"],
                                   front.Sum, 1.0, 1.0, -1, [], in_program_order=True,
                                   waiter_follows=_synchronous(opts)), DTYPES["uint8"])
        except _native.HerringError as e:  # the engine failed already (a lost rank): torch's error type
            raise _failed(self._what("barrier"), e) from e
        return self._work("barrier", [EnginePart(work)], lambda values: None, [], opts, [])

    def monitored_barrier(self, timeout=None, wait_all_ranks=False):
        """torch.distributed.monitored_barrier refuses every backend but gloo before it reaches one;
        called on the group directly, the same refusal."""
        raise RuntimeError("herring: monitored_barrier is only implemented for GLOO backend (torch's own "
                           "restriction); use barrier()")

    # --- point to point ------------------------------------------------------------------------
    def _p2p(self, what, post, tensors, peer_text, tag, source=None):
        """`post(address, bytes)` -> the engine's transfer; `source()` -> the sender's group rank
        (a receive's Work answers source_rank() with it, as gloo's do)."""
        if self._stale():
            raise self._stale_error(what)
        tensor = tensors[0]
        buf = tensor if tensor.is_contiguous() else tensor.contiguous()
        _dtype_code(buf)
        transfer = post(buf.data_ptr(), buf.numel() * buf.element_size())
        copy_back = what == "recv" and buf is not tensor

        def finish(values):
            if copy_back:
                tensor.copy_(buf)

        # Named apart from the collectives: only two ranks take part (a chain id for its future).
        work = HerringWork(self._what(f"{what} ({peer_text}, tag {tag})"), [TransferPart(transfer)], finish,
                           list(tensors), self._timeout, [buf], chain=f"{what}.{peer_text}.{tag}")
        work._source = source
        return work

    def send(self, tensors, dst, tag=0):
        peer = self._ranks[dst]
        return self._p2p("send", lambda address, size: _native.p2p_send(front.engine(), peer, int(tag), address, size),
                         tensors, f"peer {dst}", tag)

    def recv(self, tensors, src, tag=0):
        peer = self._ranks[src]
        return self._p2p("recv", lambda address, size: _native.p2p_recv(front.engine(), peer, int(tag), address, size),
                         tensors, f"peer {src}", tag, source=lambda: src)

    def recv_anysource(self, tensors, tag=0):
        """gloo's recvAnysource: the first message with `tag` from any other member of the group
        (each sender's in the order it sent them); the Work's source_rank() names the sender."""
        holder = {}

        def post(address, size):
            holder["transfer"] = _native.p2p_recv_any(front.engine(), self._ranks, int(tag), address, size)
            return holder["transfer"]

        return self._p2p("recv", post, tensors, "any source", tag,
                         source=lambda: self._ranks.index(holder["transfer"].source))


def _run_eagerly(cls):
    """torch.compile must call the collectives, not trace into them: Dynamo treats a process
    group as an opaque object (DDP's forward broadcasts buffers from inside a compiled frame).
    Only the entry points torch calls are wrapped: what they call runs eagerly with them
    (recursive), and each wrapper costs microseconds per call."""
    torch_calls = {"_allgather_base", "_reduce_scatter_base"}  # the entry points with a leading _
    for name, fn in list(vars(cls).items()):
        entry = not name.startswith("_") or name in torch_calls
        if callable(fn) and entry and not isinstance(fn, property):
            setattr(cls, name, torch.compiler.disable(fn, recursive=True))
    return cls


_run_eagerly(HerringProcessGroup)
