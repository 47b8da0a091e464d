"""Runs inside every rank (horovodrun, HOROVOD_BACKEND=herring): Average of integer tensors whose
sums overflow their type, through Horovod's torch API (allreduce, in place, async, grouped,
cached repeats, large tensors, pre/postscale, reducescatter) and torch.distributed's AVG, against
the exact average: every rank's inputs summed in Python integers, divided by the size and
truncated toward zero (torch's rounding_mode="trunc"; Horovod's integer postscale truncates too).

Every rank computes every rank's input, runs the same collectives in the same order and compares
afterwards. Results go to $HERRING_TEST_RESULTS/<rank>.json: {"results": {check: "ok" | traceback}}.
"""

import json
import os
import sys
import traceback
from fractions import Fraction

import torch
import torch.distributed as dist

import horovod.torch as hvd
import hvd_herring.torch.distributed  # noqa: F401  (registers the "herring" backend)

CHECKS = []
INTEGERS = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]
N = R = None


def check(fn):
    CHECKS.append(fn)
    return fn


def extremes(dtype):
    info = torch.iinfo(dtype)
    return info.min, info.max


def make(rank, count, dtype, seed):
    """Values near the type's limits (so that every sum overflows it), then random ones."""
    lo, hi = extremes(dtype)
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    head = [hi, lo, hi - rank, lo + rank, hi // 2 + rank, 0, 1 + rank, -1 if lo < 0 else 2]
    if dtype == torch.int64:  # torch.randint takes no bound past int64's range
        tail = torch.randint(-2**62, 2**62, (count,), generator=g, dtype=torch.int64) * 2
    else:
        tail = torch.randint(lo, hi + 1, (count,), generator=g, dtype=torch.int64)
    return torch.cat([torch.tensor(head, dtype=torch.int64), tail]).to(dtype)


def trunc_div(numerator, denominator):
    """numerator / denominator truncated toward zero, exactly (Fractions or ints)."""
    q = Fraction(numerator) / Fraction(denominator)
    return int(q)  # int() of a Fraction truncates toward zero


def exact_average(inputs, dtype, postscale=1.0):
    """What Average must give: sums in Python integers, divided exactly, truncated, postscaled."""
    lo, hi = extremes(dtype)
    columns = zip(*[t.tolist() for t in inputs])
    out = []
    for column in columns:
        value = trunc_div(Fraction(sum(column)) * Fraction(postscale), len(inputs))
        out.append(min(hi, max(lo, value)))
    return torch.tensor(out, dtype=torch.int64).to(dtype)


def expect_equal(actual, expected, what):
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    if not torch.equal(actual, expected):
        bad = (actual.long() != expected.long()).nonzero().flatten()[:6].tolist()
        raise AssertionError(f"{what}: differs at {bad}: actual {[actual[i].item() for i in bad]} "
                             f"expected {[expected[i].item() for i in bad]}")


@check
def the_issues_int8_case():
    # Both ranks hold [100, -100, 127, 3]; the sum wrapped in int8 gave [-28, 28, -1, 3].
    t = torch.tensor([100, -100, 127, 3], dtype=torch.int8)
    expect_equal(hvd.allreduce(t, op=hvd.Average, name="issue.int8"), t, "int8 [100, -100, 127, 3]")
    # ... and int16 [30000, 30000] (sum 60000 > 32767).
    s = torch.tensor([30000, 30000, -30000], dtype=torch.int16)
    expect_equal(hvd.allreduce(s, op=hvd.Average, name="issue.int16"), s, "int16 [30000, 30000, -30000]")


@check
def every_integer_type_small_and_large():
    # 17 elements: the one-step path; 70000: through the staging slots and the server shards.
    for count in (17, 70000):
        for i, dtype in enumerate(INTEGERS):
            mine = make(R, count, dtype, 10 + i)
            out = hvd.allreduce(mine, op=hvd.Average, name=f"avg.{dtype}.{count}")
            expect_equal(out, exact_average([make(r, count, dtype, 10 + i) for r in range(N)], dtype),
                         f"allreduce Average {dtype} x{count}")


@check
def cached_repeats_in_place_and_async():
    # The same name again: cached, the path where a lone small allreduce posts its inputs.
    for dtype in INTEGERS:
        expected = exact_average([make(r, 9, dtype, 30) for r in range(N)], dtype)
        for repeat in range(3):
            t = make(R, 9, dtype, 30)
            hvd.allreduce_(t, op=hvd.Average, name=f"cached.{dtype}")
            expect_equal(t, expected, f"allreduce_ Average {dtype}, repeat {repeat}")
        h = hvd.allreduce_async(make(R, 9, dtype, 30), op=hvd.Average, name=f"async.{dtype}")
        expect_equal(hvd.synchronize(h), expected, f"allreduce_async Average {dtype}")


@check
def grouped_with_mixed_types():
    tensors = [make(R, 5 + i, dtype, 40 + i) for i, dtype in enumerate(INTEGERS)] + [torch.ones(3) * R]
    outs = hvd.grouped_allreduce(tensors, op=hvd.Average, name="grouped.ints")
    for i, dtype in enumerate(INTEGERS):
        expect_equal(outs[i], exact_average([make(r, 5 + i, dtype, 40 + i) for r in range(N)], dtype),
                     f"grouped Average {dtype}")
    assert torch.allclose(outs[-1], torch.full((3,), sum(range(N)) / N)), outs[-1]


@check
def pre_and_postscale():
    # The postscale applies to the exact average (then truncates, saturating); the prescale
    # scales each input in its type, as it does for every other op.
    mine = make(R, 12, torch.int16, 50)
    everyone = [make(r, 12, torch.int16, 50) for r in range(N)]
    out = hvd.allreduce(mine, op=hvd.Average, postscale_factor=0.5, name="post.int16")
    expect_equal(out, exact_average(everyone, torch.int16, postscale=0.5), "Average int16 postscale 0.5")
    small = torch.tensor([3 + R, -7 - R, 10], dtype=torch.int32)
    out = hvd.allreduce(small, op=hvd.Average, prescale_factor=2.0, name="pre.int32")
    prescaled = [torch.tensor([2 * (3 + r), 2 * (-7 - r), 20], dtype=torch.int32) for r in range(N)]
    expect_equal(out, exact_average(prescaled, torch.int32), "Average int32 prescale 2")


@check
def reducescatter_average():
    rows = 8 * N  # make() adds 8 values to the count: 8 rows per rank
    mine = make(R, rows - 8, torch.int8, 60).reshape(rows, 1)
    out = hvd.reducescatter(mine, op=hvd.Average, name="rs.int8")
    whole = exact_average([make(r, rows - 8, torch.int8, 60) for r in range(N)], torch.int8).reshape(rows, 1)
    expect_equal(out, whole[R * 8:(R + 1) * 8], "reducescatter Average int8")


@check
def empty_and_scalar():
    e = hvd.allreduce(torch.zeros(0, 3, dtype=torch.int8), op=hvd.Average, name="empty.int8")
    assert e.shape == (0, 3) and e.dtype == torch.int8, e
    s = hvd.allreduce(torch.tensor(120 + R, dtype=torch.int8), op=hvd.Average, name="scalar.int8")
    expect_equal(s, torch.tensor(int(sum(120 + r for r in range(N)) / N), dtype=torch.int8), "scalar int8")


@check
def torch_distributed_avg():
    for i, dtype in enumerate(INTEGERS):
        t = make(R, 11, dtype, 70 + i)
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
        expect_equal(t, exact_average([make(r, 11, dtype, 70 + i) for r in range(N)], dtype),
                     f"torch.distributed all_reduce AVG {dtype}")


def main():
    global N, R
    dist.init_process_group("herring")
    hvd.init()  # the same engine
    N, R = hvd.size(), hvd.rank()
    results = {}
    for fn in CHECKS:
        try:
            fn()
            results[fn.__name__] = "ok"
        except Exception:
            results[fn.__name__] = traceback.format_exc()
    out_dir = os.environ.get("HERRING_TEST_RESULTS")
    if out_dir:
        with open(os.path.join(out_dir, f"{R}.json"), "w") as f:
            json.dump({"results": results, "counters": hvd_herring_counters()}, f)
    hvd.barrier()
    dist.destroy_process_group()
    hvd.shutdown()
    failed = [k for k, v in results.items() if v != "ok"]
    for k in failed:
        print(f"rank {R}: {k} FAILED\n{results[k]}", file=sys.stderr)
    sys.exit(1 if failed else 0)


def hvd_herring_counters():
    import hvd_herring
    return hvd_herring.counters()


if __name__ == "__main__":
    main()
