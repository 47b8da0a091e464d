"""The arguments of HerringProcessGroup's methods, as c10d's ProcessGroup takes them.

Two jobs, both so that a caller cannot tell the herring group from gloo's:
- `overload`-style normalisation: torch's pybind ProcessGroup offers convenience forms
  (`pg.allreduce(t)`, `pg.broadcast(t, root=0)`, `pg.allgather(outs, t)`, `pg.reduce(t, root)`,
  `pg.gather(outs, t, root)`, `pg.scatter(out, ins, root)`, `pg.reduce_scatter(out, ins, op)`)
  beside `(tensors, opts)`. A Python subclass replaces the whole method, so it takes both here.
- the checks ProcessGroupGloo makes before communicating, with its exception type (RuntimeError,
  what c10::Error becomes) and its words, so code and tests written against gloo's messages keep
  working. Every check is local: a bad argument fails on the rank that passed it, before anything
  is sent (gloo does the same)."""

import torch
from torch.distributed import ReduceOp


def invalid(what, message):
    """ProcessGroupGloo's invalidArgument: a RuntimeError naming the collective."""
    return RuntimeError(f"herring {what}: {message}")


def as_list(tensors):
    return [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)


def _is_op(value):
    return isinstance(value, (ReduceOp, ReduceOp.RedOpType))


def options(cls, opts, **fields):
    """`opts` if it is already a `cls`; otherwise a default `cls` with the given fields set
    (those the convenience forms pass: root, op)."""
    if isinstance(opts, cls):
        return opts
    made = cls()
    for name, value in fields.items():
        if value is not None:
            setattr(made, name, value)
    return made


def reduce_op_of(opts, op):
    """allreduce(tensors, opts) | allreduce(tensors, op) | allreduce(tensor, op=...)."""
    if _is_op(opts):
        return opts
    return op


def check_root_rank(what, root, size):
    if root < 0 or root >= size:
        raise invalid(what, f"invalid root rank: {root}")


def check_root_tensor(what, index, count):
    if index < 0 or index >= count:
        raise invalid(what, f"invalid root tensor: {index}")


def check_same(what, tensors, reference):
    """Every tensor has `reference`'s dtype and sizes (gloo: 'invalid tensor type/size')."""
    for t in tensors:
        if t.dtype != reference.dtype or t.layout != reference.layout:
            raise invalid(what, f"invalid tensor type (expected {reference.dtype}, got {t.dtype})")
        if t.shape != reference.shape:
            raise invalid(what, f"invalid tensor size (expected {list(reference.shape)}, got {list(t.shape)})")


def check_allreduce(tensors, reduce_op):
    what = "allreduce"
    if not tensors:
        raise invalid(what, "requires non-empty tensor list")
    sparse = tensors[0].layout == torch.sparse_coo
    for t in tensors:
        if (t.layout == torch.sparse_coo) != sparse:
            raise invalid(what, f"invalid tensor layout (expected {tensors[0].layout}, got {t.layout})")
    if len(tensors) > 1:  # one tensor is trivially like itself
        check_same(what, tensors, tensors[0])
    if sparse:
        kind = getattr(reduce_op, "op", reduce_op)
        if kind != ReduceOp.RedOpType.SUM:
            raise invalid(what, f"unsupported reduction operation {kind} on sparse tensors (only SUM)")
    return sparse


def check_allreduce_coalesced(tensors):
    what = "allreduce_coalesced"
    if not tensors:
        raise invalid(what, "requires non-empty tensor list")
    for i, t in enumerate(tensors):  # gloo's order: the layout, then the type
        if t.layout != tensors[0].layout:
            raise invalid(what, f"invalid tensor layout at index {i} (expected {tensors[0].layout}, got {t.layout})")
        if t.dtype != tensors[0].dtype:
            raise invalid(what, f"tensors must all have the same type (index {i} is {t.dtype}, "
                                f"index 0 is {tensors[0].dtype})")
    if tensors[0].layout != torch.strided:
        raise invalid(what, f"unsupported layout {tensors[0].layout}")


def check_broadcast(tensors, opts, size):
    what = "broadcast"
    check_root_rank(what, opts.rootRank, size)
    check_root_tensor(what, opts.rootTensor, len(tensors))
    check_same(what, tensors, tensors[0])


def check_reduce(tensors, opts, size):
    what = "reduce"
    check_root_rank(what, opts.rootRank, size)
    check_root_tensor(what, opts.rootTensor, len(tensors))
    if len(tensors) != 1:
        raise invalid(what, f"requires a single-element tensor list (got {len(tensors)})")


def check_allgather(output_lists, inputs, size):
    what = "allgather"
    if not inputs:
        raise invalid(what, "requires non-empty input tensor list")
    if len(output_lists) != len(inputs):
        raise invalid(what, f"requires input/output tensor lists to have the same length (got {len(inputs)} "
                            f"inputs and {len(output_lists)} output lists)")
    expected = size * len(inputs)
    for i, outputs in enumerate(output_lists):
        if len(outputs) != expected:
            raise invalid(what, f"invalid output tensor list at index {i} (expected length {expected}, "
                                f"got {len(outputs)})")
    check_same(what, inputs, inputs[0])
    for outputs in output_lists:
        check_same(what, outputs, inputs[0])


def check_allgather_coalesced(output_lists, inputs, size):
    what = "allgather_coalesced"
    if len(output_lists) != size:
        raise invalid(what, f"output lists should be equal to world size ({len(output_lists)} != {size})")
    for outputs in output_lists:
        if len(outputs) != len(inputs):
            raise invalid(what, f"invalid output size: each output list holds {len(outputs)} tensors, "
                                f"there are {len(inputs)} inputs")
        for i, (out, inp) in enumerate(zip(outputs, inputs)):
            if out.dtype != inp.dtype:
                raise invalid(what, f"invalid tensor type at index {i} (expected {inp.dtype}, got {out.dtype})")
            if out.shape != inp.shape:
                raise invalid(what, f"invalid size of output tensor at index {i} (expected {list(inp.shape)}, "
                                    f"got {list(out.shape)})")


def check_gather(output_lists, inputs, root, rank, size):
    what = "gather"
    check_root_rank(what, root, size)
    if len(inputs) != 1:
        raise invalid(what, f"requires a single-element input tensor list (got {len(inputs)})")
    if rank == root:
        if len(output_lists) != 1:
            raise invalid(what, f"requires a single-element output list (got {len(output_lists)})")
        if len(output_lists[0]) != size:
            raise invalid(what, f"Incorrect output list size {len(output_lists[0])}. Output list size should be "
                                f"{size}, same as size of the process group.")
        check_same(what, output_lists[0], inputs[0])
    elif any(len(outputs) for outputs in output_lists):
        raise invalid(what, "requires empty output on non-root")


def check_scatter(outputs, input_lists, root, rank, size):
    what = "scatter"
    check_root_rank(what, root, size)
    if len(outputs) != 1:
        raise invalid(what, f"requires a single-element output tensor list (got {len(outputs)})")
    if rank == root:
        if len(input_lists) != 1:
            raise invalid(what, f"requires a single-element input list (got {len(input_lists)})")
        if len(input_lists[0]) != size:
            raise invalid(what, f"Incorrect input list size {len(input_lists[0])}. Input list size should be "
                                f"{size}, same as size of the process group.")
        check_same(what, input_lists[0], outputs[0])
    elif any(len(inputs) for inputs in input_lists):
        raise invalid(what, "requires empty input on non-root")


def check_cpu(what, tensors):
    for t in tensors:
        if t.device.type != "cpu":
            raise invalid(what, f"unsupported device type {t.device.type} (herring reduces CPU tensors)")

