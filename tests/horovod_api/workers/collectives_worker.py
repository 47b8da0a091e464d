"""Runs inside every rank (launched by horovodrun or mpirun): every collective and dtype of
Horovod's torch API, checked against references computed from all ranks' inputs.

Every rank can compute every rank's input (inputs depend only on the rank and the check), so each
rank builds the reference itself. All ranks run the same collectives in the same order and only
compare afterwards, so a failing check never leaves a peer waiting. Results go to
$HERRING_TEST_RESULTS/<rank>.json, one entry per check.
"""

import os
import sys
import time

import torch

import api_checks
import forked_child
import memory_misuses
import horovod.torch as hvd
from checks import check, run_and_report, selected
from references import (ALL_DTYPES, FLOATS, assert_close, bytes_identical_everywhere, counters,
                        fewest_buffers_of_a_burst, make, reduce_reference)


N = None
R = None


# --- allreduce ---------------------------------------------------------------------------------

@check
def allreduce_every_dtype_and_op():
    seed = 1
    cases = []
    for dtype in ALL_DTYPES:
        for op in (hvd.Sum, hvd.Average, hvd.Min, hvd.Max, hvd.Product):
            seed += 1
            kind = "product" if op == hvd.Product else "any"
            shape = (17, 5)
            mine = make(R, shape, dtype, seed, kind)
            out = hvd.allreduce(mine, op=op, name=f"ar.{dtype}.{op}")
            expected = reduce_reference([make(r, shape, dtype, seed, kind) for r in range(N)], op)
            cases.append((out, expected, f"allreduce {dtype} op={op}"))
    for out, expected, what in cases:
        assert_close(out, expected, what)


@check
def allreduce_bool_min_max():
    a = make(R, (33,), torch.bool, 70)
    lo = hvd.allreduce(a, op=hvd.Min, name="bool.min")
    hi = hvd.allreduce(a, op=hvd.Max, name="bool.max")
    everyone = [make(r, (33,), torch.bool, 70) for r in range(N)]
    assert torch.equal(lo, torch.stack(everyone).all(dim=0))
    assert torch.equal(hi, torch.stack(everyone).any(dim=0))


@check
def allreduce_in_place_async_poll_and_scaling():
    t = make(R, (1000,), torch.float32, 80)
    h = hvd.allreduce_async_(t, op=hvd.Sum, name="inplace", prescale_factor=0.5, postscale_factor=3.0)
    while not hvd.poll(h):
        time.sleep(0.001)
    res = hvd.synchronize(h)
    assert res.data_ptr() == t.data_ptr(), "in-place allreduce must return its input tensor"
    expected = reduce_reference([make(r, (1000,), torch.float32, 80) * 0.5 for r in range(N)], hvd.Sum) * 3.0
    assert_close(t, expected, "allreduce_ with pre/postscale")
    src = make(R, (10,), torch.float64, 81)
    keep = src.clone()
    out = hvd.synchronize(hvd.allreduce_async(src, name="outofplace"))
    assert torch.equal(src, keep), "allreduce_async must not modify its input"
    assert_close(out, reduce_reference([make(r, (10,), torch.float64, 81) for r in range(N)], hvd.Average),
                 "allreduce_async average")


@check
def allreduce_results_bitwise_identical_on_every_rank():
    for dtype in FLOATS:
        out = hvd.allreduce(make(R, (4099,), dtype, 90), op=hvd.Sum, name=f"bitwise.in.{dtype}")
        bytes_identical_everywhere(out, f"allreduce {dtype}")


@check
def allreduce_large_tensor_through_chunks():
    # Many times the shared-memory slot (2 MiB by default): streams through it in chunks.
    n = 5 * 1024 * 1024 + 3
    out = hvd.allreduce(make(R, (n,), torch.float32, 95), op=hvd.Sum, name="large")
    expected = reduce_reference([make(r, (n,), torch.float32, 95) for r in range(N)], hvd.Sum)
    assert_close(out, expected, "large allreduce")


@check
def allreduce_empty_and_scalar():
    e = hvd.allreduce(torch.zeros(0, 3), name="empty")
    assert e.shape == (0, 3)
    s = hvd.allreduce(torch.tensor(float(R)), op=hvd.Sum, name="scalar")
    assert s.item() == sum(range(N)), s


@check
def synchronous_calls_read_tensors_in_cpp():
    # hvd.allreduce_, allreduce, broadcast_ and broadcast read their tensors in C++
    # (hvd_herring._torch_native), built wherever torch is importable. What it does not take (not
    # a tensor, not dense and contiguous, a dtype without an engine code) it hands back (None) to
    # the Python path, whose checks raise Horovod's errors (allreduce_non_contiguous_input,
    # bad_input_is_rejected_locally).
    from hvd_herring.basics import basics
    from hvd_herring.torch import mpi_ops
    native = mpi_ops._torch_native
    assert native is not None, "hvd_herring._torch_native was not built"

    def run(tensor, name):
        return native.run_one(basics.slot_address, tensor, tensor, mpi_ops._ALLREDUCE, name, 0, hvd.Sum, 1.0, 1.0,
                              -1)

    t = torch.full((3, 4), float(R + 1), dtype=torch.float64)
    assert run(t, "cpp.direct") is not None
    assert torch.all(t == N * (N + 1) / 2), t
    for what, tensor in (("a list", [1.0]), ("a non-contiguous tensor", torch.ones(4, 4).t()),
                         ("a complex tensor", torch.ones(2, dtype=torch.complex64)),
                         ("a sparse tensor", torch.ones(2).to_sparse())):
        assert run(tensor, "cpp.not.taken") is None, f"{what} must be left to the Python path"

    # hvd.allreduce (a new output): the output allocated in C++ unless a gradient must be recorded.
    def allreduce(tensor, name, op=hvd.Sum):
        return native.allreduce(basics.slot_address, tensor, name, 0, op, 1.0, 1.0)

    x = torch.full((5,), float(R + 1), dtype=torch.float32)
    out = allreduce(x, "cpp.new")
    assert out is not None and out.data_ptr() != x.data_ptr() and torch.all(x == R + 1), (out, x)
    assert torch.all(out == N * (N + 1) / 2) and out.dtype == x.dtype and out.shape == x.shape, out
    avg = hvd.allreduce(torch.full((2, 3), float(R + 1)), name="cpp.new.average")  # op None: Average
    assert torch.allclose(avg, torch.full((2, 3), (N + 1) / 2)), avg
    needs_grad = torch.ones(3, requires_grad=True)
    assert allreduce(needs_grad, "cpp.new.grad") is None, "a tensor needing a gradient must take autograd's path"
    with torch.no_grad():
        out = allreduce(needs_grad, "cpp.new.nograd")
    assert out is not None and out.grad_fn is None and not out.requires_grad and torch.all(out == N), out
    y = hvd.allreduce(torch.ones(3, requires_grad=True), op=hvd.Sum, name="cpp.new.graph")
    assert y.grad_fn is not None, "autograd's path records the allreduce"
    for what, tensor in (("a non-contiguous tensor", torch.ones(4, 4).t()),
                         ("a complex tensor", torch.ones(2, dtype=torch.complex64))):
        assert allreduce(tensor, "cpp.new.not.taken") is None, f"{what} must be left to the Python path"


@check
def allreduce_non_contiguous_input():
    base = make(R, (6, 8), torch.float32, 97)
    view = base.t()  # not contiguous
    out = hvd.allreduce(view, op=hvd.Sum, name="noncontig")
    expected = reduce_reference([make(r, (6, 8), torch.float32, 97).t() for r in range(N)], hvd.Sum)
    assert_close(out, expected.contiguous(), "non-contiguous allreduce")
    try:
        hvd.allreduce_(view, name="noncontig.inplace")
    except ValueError as e:
        assert "contiguous" in str(e), e
    else:
        raise AssertionError("in-place allreduce of a non-contiguous tensor must raise")


@check
def many_small_tensors_are_fused():
    inputs = {i: [make(r, (i + 1,), torch.float32, 200 + i) for r in range(N)] for i in range(64)}
    buffers, outs = fewest_buffers_of_a_burst(
        lambda attempt: [hvd.allreduce_async(inputs[i][R], op=hvd.Sum, name=f"small.{attempt}.{i}") for i in range(64)])
    for i, out in enumerate(outs):
        assert_close(out, reduce_reference(inputs[i], hvd.Sum), f"small tensor {i}")
    assert buffers < 65, f"64 small tensors behind a large one took {buffers} fused buffers (fewest of 3 bursts)"


# --- grouped allreduce -------------------------------------------------------------------------

@check
def grouped_allreduce_variants():
    shapes = [(3,), (4, 5), (1,), (2, 2, 2)]
    mine = [make(R, s, torch.float32, 300 + i) for i, s in enumerate(shapes)]
    refs = [reduce_reference([make(r, s, torch.float32, 300 + i) for r in range(N)], hvd.Average)
            for i, s in enumerate(shapes)]
    outs = hvd.grouped_allreduce(mine, name="group.a")
    for o, e in zip(outs, refs):
        assert_close(o, e, "grouped_allreduce")
    outs = hvd.synchronize(hvd.grouped_allreduce_async(mine, name="group.b"))
    for o, e in zip(outs, refs):
        assert_close(o, e, "grouped_allreduce_async")
    copies = [m.clone() for m in mine]
    hvd.grouped_allreduce_(copies, name="group.c")
    for o, e in zip(copies, refs):
        assert_close(o, e, "grouped_allreduce_")
    copies = [m.clone() for m in mine]
    hvd.synchronize(hvd.grouped_allreduce_async_(copies, op=hvd.Sum, name="group.d"))
    sums = [reduce_reference([make(r, s, torch.float32, 300 + i) for r in range(N)], hvd.Sum)
            for i, s in enumerate(shapes)]
    for o, e in zip(copies, sums):
        assert_close(o, e, "grouped_allreduce_async_")


@check
def grouped_collectives_with_mixed_dtypes():
    # As in Horovod, a group may mix dtypes (one fusion buffer per dtype); results come back in
    # the group's order.
    dtypes = [torch.float32, torch.float64, torch.float32, torch.float16, torch.int32]
    shapes = [(3,), (2, 2), (5,), (4,), (3,)]
    mine = [make(R, s, d, 330 + i) for i, (s, d) in enumerate(zip(shapes, dtypes))]
    theirs = [[make(r, s, d, 330 + i) for r in range(N)] for i, (s, d) in enumerate(zip(shapes, dtypes))]
    outs = hvd.grouped_allreduce(mine, name="group.mixed", op=hvd.Sum)
    for i, (o, t) in enumerate(zip(outs, theirs)):
        assert o.dtype == dtypes[i], f"grouped_allreduce mixed dtypes {i}: {o.dtype}"
        assert_close(o, reduce_reference(t, hvd.Sum), f"grouped_allreduce mixed dtypes {i}")
    copies = [m.clone() for m in mine]
    handle = hvd.grouped_allreduce_async_(copies, op=hvd.Sum, name="group.mixed.inplace")
    while not hvd.poll(handle):
        time.sleep(0.001)
    hvd.synchronize(handle)
    for i, (o, t) in enumerate(zip(copies, theirs)):
        assert_close(o, reduce_reference(t, hvd.Sum), f"grouped_allreduce_ mixed dtypes {i}")
    rows = [make(R, (R + 1, 2), d, 350 + i) for i, d in enumerate(dtypes[:3])]
    gathered = hvd.grouped_allgather(rows, name="group.mixed.ag")
    for i, (o, d) in enumerate(zip(gathered, dtypes[:3])):
        assert torch.equal(o, torch.cat([make(r, (r + 1, 2), d, 350 + i) for r in range(N)])), \
            f"grouped_allgather mixed dtypes {i}"


# --- allgather ---------------------------------------------------------------------------------

@check
def allgather_first_dimension_differs_per_rank():
    for dtype in ALL_DTYPES + [torch.bool]:
        mine = make(R, (R + 1, 3), dtype, 400)
        out = hvd.allgather(mine, name=f"ag.{dtype}")
        expected = torch.cat([make(r, (r + 1, 3), dtype, 400) for r in range(N)])
        assert torch.equal(out, expected), f"allgather {dtype}"


@check
def grouped_allgather_and_empty_contribution():
    a = make(R, (R, 2), torch.float32, 410)  # rank 0 contributes no rows
    b = make(R, (2,), torch.float32, 411)
    outs = hvd.grouped_allgather([a, b], name="gag")
    assert torch.equal(outs[0], torch.cat([make(r, (r, 2), torch.float32, 410) for r in range(N)]))
    assert torch.equal(outs[1], torch.cat([make(r, (2,), torch.float32, 411) for r in range(N)]))


# --- broadcast ---------------------------------------------------------------------------------

@check
def broadcast_from_every_root_and_dtype():
    for root in range(N):
        for dtype in ALL_DTYPES + [torch.bool]:
            mine = make(R, (7, 2), dtype, 500 + root)
            out = hvd.broadcast(mine, root_rank=root, name=f"bc.{root}.{dtype}")
            assert torch.equal(out, make(root, (7, 2), dtype, 500 + root)), f"broadcast root {root} {dtype}"
    t = make(R, (5,), torch.float32, 520)
    hvd.broadcast_(t, root_rank=N - 1, name="bc.inplace")
    assert torch.equal(t, make(N - 1, (5,), torch.float32, 520))


@check
def broadcast_object_and_allgather_object():
    api_checks.broadcast_object_and_allgather_object(hvd, R, N)


# --- alltoall ----------------------------------------------------------------------------------

@check
def alltoall_with_and_without_splits():
    splits = api_checks.alltoall_splits(R, N)  # rows this rank sends to each rank
    rows = sum(splits)
    mine = make(R, (rows, 2), torch.float32, 600)
    out, received = hvd.alltoall(mine, splits=torch.tensor(splits, dtype=torch.int32), name="a2a")
    expected, expected_splits = api_checks.alltoall_received(R, N, lambda r, n: make(r, (n, 2), torch.float32, 600))
    assert torch.equal(out, torch.cat(expected)), "alltoall with splits"
    assert received.tolist() == expected_splits, received
    even = make(R, (2 * N, 3), torch.int32, 610)
    out = hvd.alltoall(even, name="a2a.even")
    assert torch.equal(out, torch.cat([make(r, (2 * N, 3), torch.int32, 610)[2 * R:2 * R + 2] for r in range(N)]))


# --- reducescatter -----------------------------------------------------------------------------

@check
def reducescatter_uneven_rows_and_ops():
    rows = 2 * N + 1  # not divisible: the first rows % N ranks get one more
    share = [rows // N + (1 if r < rows % N else 0) for r in range(N)]
    start = sum(share[:R])
    for op in (hvd.Sum, hvd.Average):
        for dtype in (torch.float32, torch.int32, torch.bfloat16):
            out = hvd.reducescatter(make(R, (rows, 3), dtype, 700), op=op, name=f"rs.{op}.{dtype}")
            full = reduce_reference([make(r, (rows, 3), dtype, 700) for r in range(N)], op)
            assert_close(out, full[start:start + share[R]], f"reducescatter {dtype} op={op}")


@check
def grouped_reducescatter():
    rows = [N * 2, N + 1]
    mine = [make(R, (n, 2), torch.float64, 710 + i) for i, n in enumerate(rows)]
    outs = hvd.grouped_reducescatter(mine, op=hvd.Sum, name="grs")
    for i, (out, n) in enumerate(zip(outs, rows)):
        share = [n // N + (1 if r < n % N else 0) for r in range(N)]
        start = sum(share[:R])
        full = reduce_reference([make(r, (n, 2), torch.float64, 710 + i) for r in range(N)], hvd.Sum)
        assert_close(out, full[start:start + share[R]], f"grouped_reducescatter {i}")


# --- autograd ----------------------------------------------------------------------------------

@check
def gradients_of_collectives():
    x = make(R, (4,), torch.float64, 800).requires_grad_()
    y = hvd.allreduce(x, op=hvd.Sum, name="grad.ar")
    (y * (R + 1)).sum().backward()
    # d/dx of sum_r (r+1) * sum_k x_k: the gradient is allreduced with the same op.
    assert torch.allclose(x.grad, torch.full((4,), float(sum(r + 1 for r in range(N))), dtype=torch.float64))
    x = make(R, (R + 1, 2), torch.float64, 801).requires_grad_()
    g = hvd.allgather(x, name="grad.ag")
    g.sum().backward()
    assert torch.allclose(x.grad, torch.ones_like(x)), x.grad  # averaged over ranks of all-ones
    x = make(R, (3,), torch.float64, 802).requires_grad_()
    b = hvd.broadcast(x, root_rank=0, name="grad.bc")
    b.sum().backward()
    assert torch.allclose(x.grad, torch.ones(3, dtype=torch.float64) * (1.0 if R == 0 else 0.0)), x.grad


@check
def sync_batch_norm_uses_the_global_batch_on_cpu():
    # Rank r holds r + 2 samples; two layers of different widths. Forward outputs, running
    # statistics and input gradients must equal batch norm over every rank's samples at once, and
    # the weight gradients, summed over ranks, its weight gradients.
    counts = [r + 2 for r in range(N)]
    inputs = [make(r, (counts[r], 3, 4, 2), torch.float64, 820) for r in range(N)]
    grads = [make(r, (counts[r], 5, 4, 2), torch.float64, 821) for r in range(N)]
    torch.manual_seed(5)
    conv = torch.nn.Conv2d(3, 5, 1).double()

    def net(bn_class):
        torch.manual_seed(6)
        first, second = bn_class(3).double(), bn_class(5).double()
        with torch.no_grad():
            for bn in (first, second):
                bn.weight.uniform_(0.5, 1.5)
                bn.bias.uniform_(-0.5, 0.5)
        return first, second

    def run(first, second, x, gy):
        x = x.clone().requires_grad_()
        out = second(conv(first(x)))
        (out * gy).sum().backward()
        return out.detach(), x.grad

    ref_first, ref_second = net(torch.nn.BatchNorm2d)
    want_out, want_grad = run(ref_first, ref_second, torch.cat(inputs), torch.cat(grads))
    conv.zero_grad()
    first, second = net(hvd.SyncBatchNorm)
    out, grad = run(first, second, inputs[R], grads[R])
    start = sum(counts[:R])
    assert_close(out, want_out[start:start + counts[R]], "SyncBatchNorm forward")
    assert_close(grad, want_grad[start:start + counts[R]], "SyncBatchNorm input gradient")
    for mine, ref, what in ((first, ref_first, "first"), (second, ref_second, "second")):
        assert_close(mine.running_mean, ref.running_mean, f"SyncBatchNorm {what} running mean")
        assert_close(mine.running_var, ref.running_var, f"SyncBatchNorm {what} running var")
        for p, q, name in ((mine.weight, ref.weight, "weight"), (mine.bias, ref.bias, "bias")):
            total = hvd.allreduce(p.grad, op=hvd.Sum, name=f"syncbn.{what}.{name}")
            assert_close(total, q.grad, f"SyncBatchNorm {what} {name} gradient summed over ranks")
    first.eval()
    x = inputs[R][:1]
    assert_close(first(x), torch.nn.functional.batch_norm(x, ref_first.running_mean, ref_first.running_var,
                                                          ref_first.weight, ref_first.bias),
                 "SyncBatchNorm in eval mode uses the running statistics")


# --- synchronization ---------------------------------------------------------------------------

@check
def barrier_and_join():
    hvd.barrier()
    # Rank r submits r + 1 allreduces of ones, then joins: a joined rank contributes zeros.
    results = []
    for i in range(R + 1):
        results.append(hvd.allreduce(torch.ones(3), op=hvd.Sum, name=f"join.step{i}"))
    last = hvd.join()
    assert last == N - 1, f"the last rank to join is {N - 1}, got {last}"
    for i, res in enumerate(results):
        # Step i is submitted by ranks i..N-1; the others have joined.
        assert torch.equal(res, torch.full((3,), float(N - i))), (i, res)
    hvd.barrier()


# --- process sets ------------------------------------------------------------------------------

@check
def static_and_dynamic_process_sets():
    ps = STATIC_SET
    members = [0, N - 1]
    assert ps.ranks == members
    if R in members:
        out = hvd.allreduce(torch.tensor([float(R)]), op=hvd.Sum, name="ps.static", process_set=ps)
        assert out.item() == sum(members), out
        assert ps.size() == 2 and ps.rank() == members.index(R)
    dyn = hvd.add_process_set([1, 2] if N > 2 else [0, 1])
    if R in dyn.ranks:
        out = hvd.allreduce(torch.tensor([float(R)]), op=hvd.Sum, name="ps.dyn", process_set=dyn)
        assert out.item() == sum(dyn.ranks), out
        gathered = hvd.allgather(torch.tensor([R]), name="ps.dyn.ag", process_set=dyn)
        assert gathered.tolist() == dyn.ranks
    assert hvd.remove_process_set(dyn)
    hvd.barrier()
    if R not in members:
        api_checks.outsider_is_refused(hvd, torch.ones(1), ps, "ps.notmember", ValueError)


# --- input validation --------------------------------------------------------------------------

@check
def bad_input_is_rejected_locally():
    def raises(fn, text):
        try:
            fn()
        except (ValueError, NotImplementedError) as e:
            assert text in str(e), f"expected {text!r} in {e}"
        else:
            raise AssertionError(f"expected an error containing {text!r}")

    raises(lambda: hvd.broadcast(torch.ones(2), root_rank=N + 5, name="bad.root"), "out of range")
    raises(lambda: hvd.alltoall(torch.ones(N + 1, 2), splits=torch.tensor([1] * N, dtype=torch.int32),
                                name="bad.splits"), "splits sum to")
    # As in Horovod, a tensor of splits holds int32.
    raises(lambda: hvd.alltoall(torch.ones(N, 2), splits=torch.ones(N, dtype=torch.int64), name="bad.splits64"),
           "32-bit integers")
    raises(lambda: hvd.allreduce(torch.ones(2, dtype=torch.complex64), name="bad.dtype"), "not supported")
    # Adasum runs on float tensors over a power-of-2 set (tests/horovod_api/test_adasum.py); an integer one is refused.
    raises(lambda: hvd.allreduce(torch.ones(2, dtype=torch.int32), op=hvd.Adasum, name="bad.adasum"), "Adasum")
    raises(lambda: hvd.allreduce(torch.ones(2, dtype=torch.bool), op=hvd.Sum, name="bad.bool"), "not supported")
    # A duplicate is checked while the first is certainly in flight (a lone request starts its
    # cycle at once, so it could otherwise complete first): the other ranks submit the name only
    # after a barrier that follows the check.
    handles = []
    for turn in ("dup.rank0.first", "dup.others.first"):
        goes_first = (hvd.rank() == 0) == (turn == "dup.rank0.first")
        if goes_first:
            handles.append(hvd.allreduce_async(torch.ones(2), name=turn))
            raises(lambda: hvd.allreduce_async(torch.ones(2), name=turn), "already in flight")
        hvd.barrier()
        if not goes_first:
            handles.append(hvd.allreduce_async(torch.ones(2), name=turn))
    for h in handles:
        hvd.synchronize(h)
    hvd.allreduce(torch.ones(2), name="dup.rank0.first")  # the name is free again


# --- disagreement between ranks -----------------------------------------------------------------

@check
def handles_own_their_request():
    # Horovod's handles are integers naming a native Work (hvd_herring.torch.mpi_ops._works): it
    # keeps the tensors alive, waits with a deadline, reports its error, hands its result out once.
    from hvd_herring.torch import mpi_ops
    from hvd_herring import _native
    # The engine reads a contiguous copy nobody else references: the Work keeps it alive.
    h = hvd.allreduce_async(make(R, (6, 4), torch.float32, 500).t(), op=hvd.Sum, name="work.copy")
    assert isinstance(h, int) and h > 0, h
    import gc
    gc.collect()
    expected = reduce_reference([make(r, (6, 4), torch.float32, 500).t() for r in range(N)], hvd.Sum)
    assert_close(hvd.synchronize(h), expected, "allreduce of a temporary contiguous copy")
    assert hvd.synchronize(h) is None, "a handle's result is handed out once"
    try:
        hvd.poll(h)
    except ValueError:
        pass
    else:
        raise AssertionError("poll of a synchronized handle must raise")
    # A deadline passes while the other ranks are late: TimeoutError, the handle stays valid.
    if R != 0:
        time.sleep(0.5)
    h = hvd.grouped_allgather_async([make(R, (R + 1,), torch.float32, 501), make(R, (2,), torch.int32, 502)],
                                    name="work.late")
    work = mpi_ops._works[h]
    if R == 0:
        try:
            work.wait(timeout=0.05)
        except TimeoutError:
            pass
        else:
            raise AssertionError("wait(timeout) before the other ranks arrived must raise TimeoutError")
        assert work.exception() is None
    outs = hvd.synchronize(h)
    assert_close(outs[0], torch.cat([make(r, (r + 1,), torch.float32, 501) for r in range(N)]), "late part 0")
    assert_close(outs[1], torch.cat([make(r, (2,), torch.int32, 502) for r in range(N)]), "late part 1")
    assert h not in mpi_ops._works
    try:
        work.take()
    except ValueError:
        pass
    else:
        raise AssertionError("a Work's result is taken once")
    # A failed request: exception() returns the engine's error, synchronize() raises it.
    odd = 1 % N
    h = hvd.allreduce_async(torch.ones((4,) if R == odd else (3,)), name="work.mismatch")
    work = mpi_ops._works[h]
    while not hvd.poll(h):
        time.sleep(0.001)
    error = work.exception()
    assert isinstance(error, _native.HerringError) and "'work.mismatch'" in str(error), repr(error)
    try:
        hvd.synchronize(h)
    except hvd.HorovodInternalError as e:
        assert str(e) == str(error), (str(e), str(error))
    else:
        raise AssertionError("synchronize of a failed request must raise")


@check
def mismatches_raise_on_every_rank_then_the_next_collective_works():
    def expect_error(fn, *parts):
        api_checks.expect_error(fn, hvd.HorovodInternalError, *parts)

    odd = 1 % N
    expect_error(lambda: hvd.allreduce(torch.ones((4,) if R == odd else (3,)), name="mismatch.shape"),
                 "'mismatch.shape'", f"rank {odd} has [4]", "[3]")
    expect_error(lambda: hvd.allreduce(torch.ones(3, dtype=torch.float64 if R == odd else torch.float32),
                                       name="mismatch.dtype"),
                 "Mismatched data types", f"rank {odd} has float64")
    expect_error(lambda: hvd.allreduce(torch.ones(3), op=hvd.Sum if R == odd else hvd.Average, name="mismatch.op"),
                 "Mismatched reduction operations", f"rank {odd} has Sum")
    expect_error(lambda: hvd.broadcast(torch.ones(2), root_rank=odd if R == 0 else 0, name="mismatch.root"),
                 "Mismatched broadcast root ranks")
    out = hvd.allreduce(torch.ones(2), op=hvd.Sum, name="after.mismatch")
    assert torch.equal(out, torch.full((2,), float(N))), out
    # The same name again with the now-agreed shape works too (the failed one left no state behind).
    out = hvd.allreduce(torch.ones(3), op=hvd.Sum, name="mismatch.shape")
    assert torch.equal(out, torch.full((3,), float(N))), out


@check
def forked_child_gets_a_clear_error():
    # A child forked after hvd.init() has none of the engine's threads: each call must raise,
    # naming the fork, instead of running the parent's cycles on the parent's sockets and shared
    # memory (the synchronous calls, read in C++, did: the parent's job aborted or hung).
    calls = (lambda: hvd.allreduce_(torch.ones(4), name="fork.in_place"),
             lambda: hvd.allreduce(torch.ones(4), name="fork.out_of_place"),
             lambda: hvd.broadcast_(torch.ones(4), root_rank=0, name="fork.broadcast"),
             lambda: hvd.synchronize(hvd.allreduce_async_(torch.ones(4), name="fork.async")))
    messages = forked_child.answer_of_forked_child(lambda: [forked_child.message_of(c) for c in calls], 60)
    assert len(messages) == 4, messages
    for m in messages:
        assert "RuntimeError" in m and "forked from process" in m, messages
    t = torch.ones(3)
    hvd.allreduce_(t, op=hvd.Sum, name="fork.parent")  # the parent's engine is untouched
    assert torch.all(t == N), t


@check
def a_tensor_in_flight_keeps_its_memory():
    # The engine (and, on one host, the peers' cross-memory writes) write a tensor's memory until
    # its request completes. Resizing the tensor or its storage, or swapping or sharing its memory,
    # must leave the old memory to the engine until then: each freed it under the engine (SIGSEGV,
    # or tensors allocated meanwhile overwritten with the sum). The tensor goes on with its new
    # memory; the result lands in the old, as it does after set_().
    for what, misuse in memory_misuses.MISUSES:
        def issue(t, what=what):
            h = hvd.allreduce_async_(t, op=hvd.Sum, name=f"inflight.{what}")
            return lambda: hvd.synchronize(h)
        memory_misuses.misused_in_flight(R, N, issue, misuse, what)
    # Moving it into zero-copy memory would do the same: refused while in flight. Without misuse
    # the memory is the tensor's again once its request completed.
    from hvd_herring.torch import move_to_zero_copy
    t = torch.full((memory_misuses.ELEMENTS,), float(R + 1))
    address = t.data_ptr()
    h = hvd.allreduce_async_(t, op=hvd.Sum, name="inflight.none")
    try:
        move_to_zero_copy(t)
    except ValueError as e:
        assert "in flight" in str(e), str(e)
    else:
        raise AssertionError("move_to_zero_copy of a tensor in flight must raise")
    hvd.synchronize(h)
    assert t.data_ptr() == address and torch.all(t == N * (N + 1) / 2), t


@check
def a_second_init_keeps_the_handles_in_flight():
    # hvd.init() on a running engine does nothing (as in Horovod): a handle issued before it
    # still gives its result.
    h = hvd.allreduce_async(torch.full((5,), float(R + 1)), op=hvd.Sum, name="reinit.pending")
    hvd.init(process_sets=[STATIC_SET])
    out = hvd.synchronize(h)
    assert out is not None and torch.all(out == N * (N + 1) / 2), out


@check
def engine_threads_are_named():
    # top -H, ps -L, gdb and py-spy show the engine's threads by these names, not as "python".
    names = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                names.append(f.read().strip())
        except OSError:
            pass   # a thread that ended meanwhile
    # No rank goes on before every rank has looked: one that finished its checks would shut
    # down, and a shutdown stops every rank's loop (as in Horovod), this one's too.
    hvd.barrier()
    assert names.count("herring-loop") == 1, f"threads of rank {R}: {sorted(names)}"
    assert names.count("herring-tcp-io") == 1, f"threads of rank {R}: {sorted(names)}"


def main():
    global N, R, STATIC_SET
    launched = int(os.environ.get("HOROVOD_SIZE", os.environ.get("OMPI_COMM_WORLD_SIZE", "1")))
    workers = launched - int(os.environ.get("HERRING_DEDICATED_SERVERS", "0"))
    STATIC_SET = hvd.ProcessSet([0, workers - 1])
    hvd.init(process_sets=[STATIC_SET])
    N, R = hvd.size(), hvd.rank()
    sys.exit(run_and_report(R, selected(), report=lambda: {"counters": counters(), "size": N}, shutdown=hvd.shutdown))


if __name__ == "__main__":
    main()
