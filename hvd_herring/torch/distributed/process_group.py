"""HerringProcessGroup: a torch.distributed ProcessGroup (written in Python, on torch's trampoline
class) whose collectives run on this process's herring engine, over one process set.

Group ranks are indices into the process set's sorted global ranks, which is also the order in
which the engine concatenates allgather and alltoall results. Collectives the engine lacks are
composed from its own where that is exact: reduce = allreduce kept by the root; gather = allgather
kept by the root; scatter = alltoall in which only the root sends; reduce_scatter with uneven
pieces = allreduce then this rank's piece. send/recv are the engine's point-to-point transfers."""

import hashlib

import torch
import torch.distributed as dist
from torch.distributed import ReduceOp

from hvd_herring import _native
from hvd_herring.basics import basics, DTYPES
from hvd_herring.torch.distributed.naming import collective_name, last_chain
from hvd_herring.torch.distributed.persistent_buffers import persistent_buffers
from hvd_herring.torch.distributed.work import CompletedWork, EnginePart, HerringWork, TransferPart, _seconds

_TORCH_DTYPES = {  # torch dtype -> the engine's dtype code
    torch.uint8: "uint8", torch.int8: "int8", torch.int16: "int16", torch.int32: "int32",
    torch.int64: "int64", torch.float16: "float16", torch.bfloat16: "bfloat16",
    torch.float32: "float32", torch.float64: "float64", torch.bool: "bool", torch.uint16: "uint16",
}
_DTYPE_CODES = {t: DTYPES[n] for t, n in _TORCH_DTYPES.items()}
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
    kind = reduce_op.op if hasattr(reduce_op, "op") else reduce_op
    if kind == _RED.PREMUL_SUM:
        factor = reduce_op.factor
        return basics.Sum, float(factor.item() if isinstance(factor, torch.Tensor) else factor)
    if dtype == torch.bool and kind in (_RED.SUM, _RED.PRODUCT):
        return (basics.Max if kind == _RED.SUM else basics.Min), 1.0
    ops = {_RED.SUM: basics.Sum, _RED.AVG: basics.Average, _RED.PRODUCT: basics.Product,
           _RED.MIN: basics.Min, _RED.MAX: basics.Max}
    if kind not in ops:
        raise ValueError(f"herring: ReduceOp {kind} is not supported (SUM, AVG, PRODUCT, MIN, MAX, PREMUL_SUM)")
    return ops[kind], 1.0


_DTYPE_NAMES = {code: name for name, code in DTYPES.items()}
_REDUCE_OP_NAMES = {code: name.lower() for name, code in _native.REDUCE_OPS.items()}


def _signature(op_type, dtype_code, reduce_op, root, args):
    """What a collective is, for its name (naming.py): the same collective in every step gets the
    same name. Only what every rank has in common: allgather and alltoall inputs may differ in
    their first dimension (and splits) from rank to rank. A group of many tensors is summarised by
    a digest of its shapes."""
    ragged = op_type in ("allgather", "alltoall")
    shapes = [("*",) + tuple(shape[1:]) if ragged else tuple(shape) for _, _, shape, _ in args]
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
    def __init__(self, rank, size, process_set_id, global_ranks, timeout_seconds, group_name=""):
        super().__init__(rank, size)
        self._set = int(process_set_id)
        self._ranks = list(global_ranks)          # global rank of every group rank
        self._timeout = timeout_seconds
        self._label = group_name
        self._desc = ""

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

    @property
    def process_set_id(self):
        return self._set

    def _what(self, op):
        return f"{op} on herring process group {self._label!r} (process set {self._set})"

    # --- plumbing ------------------------------------------------------------------------------
    def _timeout_of(self, opts):
        seconds = _seconds(getattr(opts, "timeout", None))
        return self._timeout if seconds is None else seconds

    def _enqueue(self, op_type, entries, dtype_code, reduce_op=None, prescale=1.0, root=-1):
        """entries: [(input tensor, output tensor or None, splits or None)] -> engine handle."""
        args = [(i.data_ptr(), 0 if o is None else o.data_ptr(), list(i.shape), list(s) if s else [])
                for i, o, s in entries]
        reduce_op = basics.Sum if reduce_op is None else reduce_op
        name = collective_name(self._set, _signature(op_type, dtype_code, reduce_op, root, args))
        return basics.enqueue(op_type, name, self._set, dtype_code, reduce_op, prescale, 1.0, root, args,
                              in_program_order=True)

    def _work(self, op, parts, finish, result, opts, keep_alive):
        return HerringWork(self._what(op), parts, finish, result, self._timeout_of(opts), keep_alive,
                           chain=last_chain(), ordered_in=self._set)

    def _by_dtype(self, tensors):
        groups = {}
        for i, t in enumerate(tensors):
            groups.setdefault(t.dtype, []).append(i)
        return list(groups.values())

    # --- allreduce -----------------------------------------------------------------------------
    def allreduce(self, tensors, opts=None):
        opts = opts if opts is not None else dist.AllreduceOptions()
        return self._allreduce(list(tensors), opts.reduceOp, opts, "allreduce")

    def allreduce_coalesced(self, tensors, opts=None):
        opts = opts if opts is not None else dist.AllreduceCoalescedOptions()
        return self._allreduce(list(tensors), opts.reduceOp, opts, "allreduce_coalesced")

    def _allreduce(self, tensors, reduce_op, opts, what):
        if not tensors:
            return CompletedWork(tensors, what)
        parts, copies_back, keep = [], [], []
        for positions in self._by_dtype(tensors):  # one grouped request per dtype, as a fusion buffer holds one
            group = [tensors[i] for i in positions]
            code = _dtype_code(group[0])
            op, prescale = _engine_op(reduce_op, group[0].dtype)
            entries = []
            for t in group:
                buf = t if t.is_contiguous() else t.contiguous()
                if buf is not t:
                    copies_back.append((t, buf))
                else:
                    persistent_buffers.visit(t)  # may move it into zero-copy memory: before its address is taken
                entries.append((buf, buf, None))
                keep.append(buf)
            parts.append(EnginePart(self._enqueue("allreduce", entries, code, op, prescale)))

        def finish(values):
            for t, buf in copies_back:
                t.copy_(buf)

        return self._work(what, parts, finish, tensors, opts, keep)

    # --- broadcast -----------------------------------------------------------------------------
    def broadcast(self, tensors, opts=None):
        opts = opts if opts is not None else dist.BroadcastOptions()
        tensors = list(tensors)
        root = self._ranks[opts.rootRank]
        parts, copies_back, keep = [], [], []
        for positions in self._by_dtype(tensors):
            entries = []
            for i in positions:
                t = tensors[i]
                buf = t if t.is_contiguous() else t.contiguous()
                if buf is not t:
                    copies_back.append((t, buf))
                entries.append((buf, buf, None))
                keep.append(buf)
            parts.append(EnginePart(self._enqueue("broadcast", entries, _dtype_code(tensors[positions[0]]), root=root)))

        def finish(values):
            for t, buf in copies_back:
                t.copy_(buf)

        return self._work("broadcast", parts, finish, tensors, opts, keep)

    # --- allgather -----------------------------------------------------------------------------
    def _allgather_flat(self, inputs, finish_with):
        """Allgathers the flattened `inputs` (one grouped request); finish_with(gathered) gets, per
        input, the concatenation of every member's piece in group-rank order."""
        flats = [_flat(t) for t in inputs]
        code = _dtype_code(inputs[0])
        handle = self._enqueue("allgather", [(f, None, None) for f in flats], code)

        def finish(values):
            gathered, _ = values[0]
            finish_with(gathered)

        return [EnginePart(handle, code)], finish, flats

    def allgather(self, output_lists, inputs, opts=None):
        opts = opts if opts is not None else dist.AllgatherOptions()
        inputs = list(inputs)

        def copy_out(gathered):
            for outputs, flat in zip(output_lists, gathered):
                offset = 0
                for out in outputs:
                    n = out.numel()
                    out.copy_(flat[offset:offset + n].view(out.shape))
                    offset += n

        parts, finish, keep = self._allgather_flat(inputs, copy_out)
        return self._work("allgather", parts, finish, output_lists, opts, keep)

    def all_gather_single(self, output, input, opts=None):
        opts = opts if opts is not None else dist.AllgatherOptions()

        def copy_out(gathered):
            output.copy_(gathered[0].view(output.shape))

        parts, finish, keep = self._allgather_flat([input], copy_out)
        return self._work("all_gather_single", parts, finish, [output], opts, keep)

    _allgather_base = all_gather_single

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        opts = opts if opts is not None else dist.AllgatherOptions()
        outputs, inputs = list(outputs), list(inputs)
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
        opts = opts if opts is not None else dist.AllgatherOptions()
        inputs = list(inputs)
        # output_lists[m][i]: input i of member m.
        gathered_lists = [[output_lists[m][i] for m in range(self.size())] for i in range(len(inputs))]
        return self.allgather(gathered_lists, inputs, opts)

    # --- reduce_scatter ------------------------------------------------------------------------
    def _reduce_scatter_flat(self, inputs, reduce_op, copy_out):
        """Reduce-scatters 1-D `inputs` whose lengths are multiples of the group size (one grouped
        request): member m gets elements [m*n, (m+1)*n) of the reduction."""
        code = _dtype_code(inputs[0])
        op, prescale = _engine_op(reduce_op, inputs[0].dtype)
        handle = self._enqueue("reducescatter", [(f, None, None) for f in inputs], code, op, prescale)

        def finish(values):
            pieces, _ = values[0]
            copy_out(pieces)

        return EnginePart(handle, code), finish

    def reduce_scatter_single(self, output, input, opts=None):
        opts = opts if opts is not None else dist.ReduceScatterOptions()
        if input.numel() != output.numel() * self.size():
            raise ValueError(f"herring reduce_scatter_single: input has {input.numel()} elements, expected "
                             f"{output.numel()} x {self.size()}")
        flat = _flat(input)
        part, finish = self._reduce_scatter_flat([flat], opts.reduceOp,
                                                 lambda pieces: output.copy_(pieces[0].view(output.shape)))
        return self._work("reduce_scatter_single", [part], finish, [output], opts, [flat])

    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        opts = opts if opts is not None else dist.ReduceScatterOptions()
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

    def reduce_scatter(self, outputs, input_lists, opts=None):
        opts = opts if opts is not None else dist.ReduceScatterOptions()
        outputs = list(outputs)
        parts, finishes, keep = [], [], []
        for out, pieces in zip(outputs, input_lists):
            flat = torch.cat([_flat(p) for p in pieces])
            keep.append(flat)
            sizes = [p.numel() for p in pieces]
            if len(set(sizes)) == 1:
                part, finish = self._reduce_scatter_flat(
                    [flat], opts.reduceOp, lambda got, out=out: out.copy_(got[0].view(out.shape)))
            else:  # uneven pieces: the engine's split would differ; reduce all, keep ours (exact)
                op, prescale = _engine_op(opts.reduceOp, flat.dtype)
                start = sum(sizes[:self.rank()])
                handle = self._enqueue("allreduce", [(flat, flat, None)], _dtype_code(flat), op, prescale)
                part = EnginePart(handle)

                def finish(values, out=out, flat=flat, start=start):
                    out.copy_(flat[start:start + out.numel()].view(out.shape))
            parts.append(part)
            finishes.append(finish)

        def finish_all(values):
            for finish, value in zip(finishes, values):
                finish([value])

        return self._work("reduce_scatter", parts, finish_all, outputs, opts, keep)

    # --- alltoall ------------------------------------------------------------------------------
    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        opts = opts if opts is not None else dist.AllToAllOptions()
        src = input if input.is_contiguous() else input.contiguous()
        if src.dim() == 0:
            src = src.view(1)
        splits = list(input_split_sizes) if input_split_sizes else [src.shape[0] // self.size()] * self.size()
        code = _dtype_code(src)
        handle = self._enqueue("alltoall", [(src, None, splits)], code)

        def finish(values):
            received, _ = values[0]
            output.copy_(received[0].view(output.shape))

        return self._work("all_to_all_single", [EnginePart(handle, code)], finish, [output], opts, [src])

    alltoall_base = all_to_all_single

    def alltoall(self, outputs, inputs, opts=None):
        opts = opts if opts is not None else dist.AllToAllOptions()
        outputs, inputs = list(outputs), list(inputs)
        flat = torch.cat([_flat(t) for t in inputs]) if inputs else torch.empty(0)
        code = _dtype_code(flat)
        handle = self._enqueue("alltoall", [(flat, None, [t.numel() for t in inputs])], code)

        def finish(values):
            received, _ = values[0]
            offset = 0
            for out in outputs:
                n = out.numel()
                out.copy_(received[0][offset:offset + n].view(out.shape))
                offset += n

        return self._work("alltoall", [EnginePart(handle, code)], finish, outputs, opts, [flat])

    # --- rooted collectives, composed ---------------------------------------------------------
    def reduce(self, tensors, opts=None):
        opts = opts if opts is not None else dist.ReduceOptions()
        tensor = tensors[opts.rootTensor]
        scratch = tensor.contiguous().clone()  # non-roots keep their input, as gloo does
        op, prescale = _engine_op(opts.reduceOp, tensor.dtype)
        handle = self._enqueue("allreduce", [(scratch, scratch, None)], _dtype_code(tensor), op, prescale)
        is_root = self.rank() == opts.rootRank

        def finish(values):
            if is_root:
                tensor.copy_(scratch)

        return self._work("reduce", [EnginePart(handle)], finish, list(tensors), opts, [scratch])

    def gather(self, output_lists, inputs, opts=None):
        opts = opts if opts is not None else dist.GatherOptions()
        inputs = list(inputs)
        is_root = self.rank() == opts.rootRank

        def copy_out(gathered):
            if not is_root:
                return
            outputs, offset = output_lists[0], 0
            for out in outputs:
                n = out.numel()
                out.copy_(gathered[0][offset:offset + n].view(out.shape))
                offset += n

        parts, finish, keep = self._allgather_flat(inputs[:1], copy_out)
        return self._work("gather", parts, finish, output_lists, opts, keep)

    def scatter(self, outputs, input_lists, opts=None):
        opts = opts if opts is not None else dist.ScatterOptions()
        out = outputs[0]
        n = self.size()
        if self.rank() == opts.rootRank:
            flat = torch.cat([_flat(t) for t in input_lists[0]])
            splits = [t.numel() for t in input_lists[0]]
        else:
            flat = torch.empty(0, dtype=out.dtype)
            splits = [0] * n
        code = _dtype_code(out)
        handle = self._enqueue("alltoall", [(flat, None, splits)], code)

        def finish(values):
            received, _ = values[0]
            out.copy_(received[0].view(out.shape))

        return self._work("scatter", [EnginePart(handle, code)], finish, list(outputs), opts, [flat])

    def barrier(self, opts=None):
        opts = opts if opts is not None else dist.BarrierOptions()
        handle = basics.enqueue("barrier", collective_name(self._set, "barrier"), self._set, DTYPES["uint8"],
                                basics.Sum, 1.0, 1.0, -1, [], in_program_order=True)
        return self._work("barrier", [EnginePart(handle, DTYPES["uint8"])], lambda values: None, [], opts, [])

    # --- point to point ------------------------------------------------------------------------
    def _p2p(self, what, fn, tensors, peer, tag):
        tensor = tensors[0]
        buf = tensor if tensor.is_contiguous() else tensor.contiguous()
        _dtype_code(buf)
        transfer = fn(basics.engine(), self._ranks[peer], int(tag), buf.data_ptr(), buf.numel() * buf.element_size())
        copy_back = what == "recv" and buf is not tensor

        def finish(values):
            if copy_back:
                tensor.copy_(buf)

        # Named apart from the collectives: only two ranks take part (a chain id for its future).
        return HerringWork(self._what(f"{what} (peer {peer}, tag {tag})"), [TransferPart(transfer)], finish,
                           list(tensors), self._timeout, [buf], chain=f"{what}.{self._ranks[peer]}.{tag}")

    def send(self, tensors, dst, tag=0):
        return self._p2p("send", _native.p2p_send, tensors, dst, tag)

    def recv(self, tensors, src, tag=0):
        return self._p2p("recv", _native.p2p_recv, tensors, src, tag)

    def recv_anysource(self, tensors, tag=0):
        raise NotImplementedError("herring: recv from any source is not supported; name the source rank")


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
