"""Runs inside every rank with HERRING_ALLREDUCE=hd or hd-topo: the allreduce paths of Horovod's
torch API, checked against references computed from every rank's inputs (any rank can compute any
rank's input), bitwise identity across ranks and across repeats, fused batches, buffers that
travel in many pieces, and a process set that is not a power of two.

All ranks run the same collectives in the same order and compare afterwards, so a failing check
never leaves a peer waiting. Results go to $HERRING_TEST_RESULTS/<rank>.json, one entry per check,
with the engine counters."""

import hashlib
import math
import os
import sys

import torch

import horovod.torch as hvd
from checks import CHECKS, check, run_and_report
from references import (ALL_DTYPES, FLOATS, assert_close, bytes_identical_everywhere, counters,
                        fewest_buffers_of_a_burst, make, reduce_reference)

N = R = None
SUBSET = None          # every rank but rank 1 (3 or more ranks): a set whose size differs from N


# Mantissa bits of the half types: halving-doubling rounds every partial sum to the tensor's
# dtype after each of its log2(n) (+1 with extras) reductions, as the ring does after each of its
# n - 1; the fixed tolerance of references.assert_close is meant for one rounding.
HALF_MANTISSA = {torch.float16: 10, torch.bfloat16: 7}


def assert_reduced(actual, inputs, op, what):
    """assert_close against the reference, with the rounding of every partial sum allowed for in
    the half types: each rounding is at most half an ulp of a partial, whose magnitude is bounded
    by the sum of the inputs' magnitudes."""
    expected = reduce_reference(inputs, op)
    dtype = actual.dtype
    if dtype in HALF_MANTISSA and op in (hvd.Sum, hvd.Average):
        roundings = math.ceil(math.log2(len(inputs))) + 2
        bound = torch.stack([x.double().abs() for x in inputs]).sum(dim=0)
        if op == hvd.Average:
            bound = bound / len(inputs)
        tolerance = roundings * 2.0 ** -HALF_MANTISSA[dtype] * bound + 2.0 ** -14
        diff = (actual.double() - expected.double()).abs()
        bad = (diff > tolerance).nonzero()
        assert bad.numel() == 0, (f"{what}: element {int(bad[0][0])} differs by {diff.flatten()[bad[0][0]].item()}, "
                                  f"more than {roundings} roundings allow ({tolerance.flatten()[bad[0][0]].item()})")
        return
    assert_close(actual, expected, what)


def everyone(shape, dtype, seed, kind="any", ranks=None):
    return [make(r, shape, dtype, seed, kind) for r in (range(N) if ranks is None else ranks)]


def digest_everywhere_equal(t, what):
    """Bitwise identity of a large result without gathering it: every rank's SHA-256."""
    mine = torch.tensor(list(hashlib.sha256(t.contiguous().view(torch.uint8).numpy().tobytes()).digest()),
                        dtype=torch.uint8).reshape(1, -1)
    all_digests = hvd.allgather(mine, name=f"digest.{what}")
    for r in range(N):
        assert torch.equal(all_digests[r], all_digests[0]), f"{what}: rank {r}'s result differs from rank 0's"


@check
def allreduce_every_dtype_and_op():
    seed, cases = 1000, []
    for dtype in ALL_DTYPES:
        for op in (hvd.Sum, hvd.Average, hvd.Min, hvd.Max, hvd.Product):
            for shape in ((17, 5), (1031,)):
                seed += 1
                kind = "product" if op == hvd.Product else "any"
                out = hvd.allreduce(make(R, shape, dtype, seed, kind), op=op, name=f"hd.{dtype}.{op}.{shape}")
                cases.append((out, everyone(shape, dtype, seed, kind), op, f"allreduce {dtype} op={op} shape={shape}"))
    for out, inputs, op, what in cases:
        assert_reduced(out, inputs, op, what)


@check
def allreduce_bool_min_max():
    a = make(R, (77,), torch.bool, 1500)
    lo = hvd.allreduce(a, op=hvd.Min, name="hd.bool.min")
    hi = hvd.allreduce(a, op=hvd.Max, name="hd.bool.max")
    stacked = torch.stack(everyone((77,), torch.bool, 1500))
    assert torch.equal(lo, stacked.all(dim=0)), "bool Min is not the logical and"
    assert torch.equal(hi, stacked.any(dim=0)), "bool Max is not the logical or"


@check
def allreduce_scaling_in_place_and_async():
    t = make(R, (3000,), torch.float64, 1600)
    h = hvd.allreduce_async_(t, op=hvd.Sum, name="hd.inplace", prescale_factor=0.25, postscale_factor=3.0)
    hvd.synchronize(h)
    expected = reduce_reference([x * 0.25 for x in everyone((3000,), torch.float64, 1600)], hvd.Sum) * 3.0
    assert_close(t, expected, "allreduce_ with prescale 0.25 and postscale 3")
    src = make(R, (64,), torch.int32, 1601)
    keep = src.clone()
    out = hvd.allreduce(src, op=hvd.Average, name="hd.int.average")
    assert torch.equal(src, keep), "allreduce must not modify its input"
    assert_close(out, reduce_reference(everyone((64,), torch.int32, 1601), hvd.Average), "int32 average")


@check
def allreduce_bitwise_identical_on_every_rank_and_repeat():
    # Random floats of mixed magnitude: any change of summation order would change the bits.
    for dtype in FLOATS:
        x = make(R, (50003,), dtype, 1700) * (10.0 ** (R % 3))
        first = hvd.allreduce(x, op=hvd.Sum, name=f"hd.bits.{dtype}")
        again = hvd.allreduce(x, op=hvd.Sum, name=f"hd.bits.{dtype}")
        assert torch.equal(first.view(torch.uint8), again.view(torch.uint8)), \
            f"{dtype}: the same allreduce gave different bits the second time"
        bytes_identical_everywhere(first, f"hd.{dtype}")


@check
def allreduce_large_buffer_in_many_pieces():
    # 20 MiB of float32: every exchange of the halving and doubling is cut into 1 MiB pieces.
    n = 5 * 1024 * 1024 + 3
    out = hvd.allreduce(make(R, (n,), torch.float32, 1800), op=hvd.Sum, name="hd.large")
    assert_close(out, reduce_reference(everyone((n,), torch.float32, 1800), hvd.Sum), "20 MiB allreduce")
    digest_everywhere_equal(out, "hd.large")


@check
def fused_small_tensors_and_groups():
    inputs = {i: everyone((i + 1,), torch.float32, 1900 + i) for i in range(48)}
    buffers, outs = fewest_buffers_of_a_burst(
        lambda attempt: [hvd.allreduce_async(inputs[i][R], op=hvd.Sum, name=f"hd.small.{attempt}.{i}")
                         for i in range(48)])
    for i, out in enumerate(outs):
        assert_close(out, reduce_reference(inputs[i], hvd.Sum), f"small {i}")
    assert buffers < 49, f"48 small tensors behind a large one took {buffers} fused buffers (fewest of 3 bursts)"
    shapes = [(3,), (4, 5), (1,), (2, 2, 2)]
    mine = [make(R, s, torch.float16, 2000 + i) for i, s in enumerate(shapes)]
    outs = hvd.grouped_allreduce(mine, op=hvd.Average, name="hd.group")
    for i, (o, s) in enumerate(zip(outs, shapes)):
        assert_reduced(o, everyone(s, torch.float16, 2000 + i), hvd.Average, f"grouped {i}")


@check
def allreduce_empty_and_scalar():
    e = hvd.allreduce(torch.zeros(0, 4), name="hd.empty")
    assert e.shape == (0, 4), e.shape
    s = hvd.allreduce(torch.tensor(float(R)), op=hvd.Sum, name="hd.scalar")
    assert s.item() == sum(range(N)), s


@check
def allreduce_over_a_process_set():
    if SUBSET is None:
        return
    members = [r for r in range(N) if r != 1]
    out = None
    if R in members:
        x = make(R, (4097,), torch.float32, 2100)
        out = hvd.allreduce(x, op=hvd.Sum, name="hd.subset", process_set=SUBSET)
    # Everyone meets again before comparing, so rank 1 cannot shut down while the others reduce.
    hvd.allreduce(torch.zeros(1), name="hd.after.subset")
    if out is not None:
        assert_close(out, reduce_reference(everyone((4097,), torch.float32, 2100, ranks=members), hvd.Sum),
                     f"allreduce over ranks {members}")


def main():
    global N, R, SUBSET
    size = int(os.environ.get("HOROVOD_SIZE", os.environ.get("OMPI_COMM_WORLD_SIZE", "1")))
    sets = []
    if size >= 3:
        SUBSET = hvd.ProcessSet([r for r in range(size) if r != 1])
        sets.append(SUBSET)
    hvd.init(process_sets=sets)
    N, R = hvd.size(), hvd.rank()
    sys.exit(run_and_report(R, CHECKS, report=lambda: {"counters": counters(), "size": N}, shutdown=hvd.shutdown))


if __name__ == "__main__":
    main()
