"""The references the torch workers check against. Inputs depend only on (rank, seed), so every
rank computes every rank's input, and with them the expected result, itself; references are
computed wide (float64, int64) and narrowed to the tensor's dtype, integers wrapping like the
engine's fixed-width arithmetic. Horovod is imported only by the helpers that run its collectives
(torch.distributed's workers run without it)."""

import torch

ALL_DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16,
              torch.float32, torch.float64]
FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
# (rtol, atol) per float dtype: one rounding of the result to the dtype.
TOLERANCES = {torch.float16: (1e-2, 1e-2), torch.bfloat16: (1e-2, 1e-2), torch.float32: (1e-5, 1e-6),
              torch.float64: (1e-12, 1e-12)}


def make(rank, shape, dtype, seed, kind="any", spread=20):
    """The input of `rank` in the check with this seed: random values; for kind="product" values near
    1 (floats) or 1 and 2 (integers), so that a product of every rank's stays in range; integers
    in [-spread, spread) ([0, spread) for uint8)."""
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if kind == "product":
        if dtype.is_floating_point:
            return (0.9 + 0.2 * torch.rand(shape, generator=g, dtype=torch.float64)).to(dtype)
        return torch.randint(1, 3, shape, generator=g).to(dtype)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    low = 0 if dtype == torch.uint8 else -spread
    return torch.randint(low, spread, shape, generator=g).to(dtype)


def op_name(op):
    """"sum", "average", "min", "max" or "product" for Horovod's op constants and those names
    ("avg", torch.distributed's, too)."""
    if isinstance(op, str):
        return "average" if op == "avg" else op
    import horovod.torch as hvd
    return {hvd.Sum: "sum", hvd.Average: "average", hvd.Min: "min", hvd.Max: "max", hvd.Product: "product"}[op]


def reduce_reference(inputs, op):
    """What an allreduce of `inputs` (one per rank) must give, computed in float64 / int64; an
    integer average is truncated toward zero."""
    op = op_name(op)
    dtype = inputs[0].dtype
    wide = [t.double() if dtype.is_floating_point else t.long() for t in inputs]
    acc = wide[0].clone()
    for t in wide[1:]:
        if op in ("sum", "average"):
            acc = acc + t
        elif op == "min":
            acc = torch.minimum(acc, t)
        elif op == "max":
            acc = torch.maximum(acc, t)
        elif op == "product":
            acc = acc * t
    if op == "average":
        acc = acc / len(inputs) if dtype.is_floating_point else torch.trunc(acc.double() * (1.0 / len(inputs)))
    if not dtype.is_floating_point:
        acc = acc.long()
        # Integer sums wrap around like the engine's fixed-width arithmetic.
        return acc.to(dtype) if dtype != torch.uint8 else (acc % 256).to(dtype)
    return acc.to(dtype)


def assert_close(actual, expected, what, tol=None, tolerances=TOLERANCES):
    """Same dtype and shape, and values within `tol` (relative and absolute, any dtype) or else the
    dtype's tolerances; integers equal."""
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    if tol is not None or actual.dtype.is_floating_point:
        rtol, atol = (tol, tol) if tol is not None else tolerances[actual.dtype]
        ok = torch.allclose(actual.double(), expected.double(), rtol=rtol, atol=atol)
    else:
        ok = torch.equal(actual, expected)
    if not ok:
        diff = (actual.double() - expected.double()).abs().max().item()
        raise AssertionError(f"{what}: max abs difference {diff}\nactual {actual.flatten()[:8]}\n"
                             f"expected {expected.flatten()[:8]}")


def counters():
    """The engine's counters (hvd_herring.counters())."""
    import hvd_herring
    return hvd_herring.counters()


def bytes_identical_everywhere(t, what):
    """Results must be bitwise identical on every rank (through Horovod's allgather)."""
    import horovod.torch as hvd
    raw = t.detach().contiguous().view(torch.uint8).reshape(1, -1)
    everyone = hvd.allgather(raw, name=f"bitwise.{what}")
    for r in range(hvd.size()):
        assert torch.equal(everyone[r], everyone[0]), f"{what}: rank {r} differs from rank 0 bitwise"


def fewest_buffers_of_a_burst(submit_burst, attempts=3):
    """Fused buffers the engine used for a large allreduce and a burst of asynchronous ones behind
    it (the fewest over `attempts` bursts; unfused, one each), and the last burst's results.
    submit_burst(attempt) returns the burst's handles.

    Fusion batches what arrives while a cycle runs; a request that finds the engine idle starts a
    cycle of its own at once (the latency path). On a fast engine, requests submitted one by one
    from Python can each find it idle, so every burst goes in behind a 16 MiB allreduce: while its
    cycle negotiates and runs, the burst queues up. Even then a rank descheduled on a busy 2-core
    machine can miss that window, so every rank runs all attempts (the same collectives
    everywhere) and the best one counts."""
    import horovod.torch as hvd
    fewest, outs = None, None
    for attempt in range(attempts):
        before = counters()["fused_buffers"]
        busy = hvd.allreduce_async(torch.ones(4 * 1024 * 1024), op=hvd.Sum, name=f"burst.busy.{attempt}")
        handles = submit_burst(attempt)
        hvd.synchronize(busy)
        outs = [hvd.synchronize(h) for h in handles]
        buffers = counters()["fused_buffers"] - before
        fewest = buffers if fewest is None else min(fewest, buffers)
    return fewest, outs


def allreduce_checked(rank, group, contributors, steps):
    """`steps` torch.distributed all_reduces of (rank + 1) * (step + 1) in `group`, each sum checked
    against the contributors' (their global ranks in the original job)."""
    import torch.distributed as dist
    for step in range(steps):
        t = torch.full((1000,), float(rank + 1)) * (step + 1)
        dist.all_reduce(t, group=group)
        expected = sum(r + 1 for r in contributors) * (step + 1)
        assert torch.all(t == expected), (step, t[:3].tolist(), expected)
