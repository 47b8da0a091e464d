"""Runs inside every rank: allreduces of every dtype and op, broadcasts from every root and ragged
allgathers, at sizes around HERRING_SMALL_MESSAGE_BYTES (below it: the one-step shared-memory path; above: the staged
pipeline), interleaved so that both paths share the arena's sub-slots in turn; the allreduces
again once their responses are cached (the smallest then travel with the bit vectors); a lone request
after a pause. Each rank draws every rank's inputs from per-rank seeds, so it checks its result
against a reference it computes itself; it also records the SHA-256 of every result's bytes, so
the test can check the bits are the same on every rank and under every path. Writes
<HERRING_TEST_RESULTS>/<rank>.json."""

import hashlib
import time

import torch

import horovod.torch as hvd
import hvd_herring
from checks import write_report

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32]
OPS = {"sum": hvd.Sum, "average": hvd.Average, "min": hvd.Min, "max": hvd.Max, "product": hvd.Product}
# Elements: 16384 float32 = 64 KiB, the default threshold (one-step); 16385 is staged.
COUNTS = [1, 7, 1000, 16384, 16385, 70000]


def inputs(rank, dtype, count, op):
    g = torch.Generator().manual_seed(1000 * rank + count)
    if dtype == torch.int32:
        high = 3 if op == "product" else 1000
        return torch.randint(1, high, (count,), generator=g, dtype=torch.int32)
    x = torch.rand(count, generator=g, dtype=torch.float64)
    x = 0.5 + x if op == "product" else x * 10 - 5
    return x.to(dtype)


def reference(size, dtype, count, op):
    xs = [inputs(r, dtype, count, op).double() for r in range(size)]
    if op in ("sum", "average"):
        out = sum(xs)
        return out / size if op == "average" else out
    if op == "product":
        out = xs[0]
        for x in xs[1:]:
            out = out * x
        return out
    return torch.stack(xs).min(0).values if op == "min" else torch.stack(xs).max(0).values


def main():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    digests, errors = {}, []
    before = dict(hvd_herring.counters())
    # Twice: the second pass finds every response cached, so on one host the small ones travel
    # with the bit vectors (HERRING_INPUTS_WITH_BITS); its digests are kept apart ("again:").
    for again in ("", "again:"):
        for count in COUNTS:
            for dtype in DTYPES:
                for op_name, op in OPS.items():
                    if dtype == torch.int32 and op_name == "average":
                        continue
                    name = f"{op_name}.{str(dtype).split('.')[-1]}.{count}"
                    out = hvd.allreduce(inputs(rank, dtype, count, op_name), name=name, op=op)
                    ref = reference(size, dtype, count, op_name)
                    tol = {torch.float16: 1e-2, torch.bfloat16: 5e-2}.get(dtype, 1e-6)
                    if not torch.allclose(out.double(), ref, rtol=tol, atol=tol):
                        errors.append(f"{again}{name}: max difference {(out.double() - ref).abs().max().item()}")
                    digests[again + name] = hashlib.sha256(out.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()
    for count in (1, 300, 5000, 20000):  # float32 rows of 1..4 elements: below and above 64 KiB
        for dtype in (torch.float32, torch.float16, torch.int32):
            for root in range(size):
                name = f"broadcast.{str(dtype).split('.')[-1]}.{count}.{root}"
                out = hvd.broadcast(inputs(rank, dtype, count, "sum"), root_rank=root, name=name)
                if not torch.equal(out, inputs(root, dtype, count, "sum")):
                    errors.append(f"{name}: not the root's tensor")
                digests[name] = hashlib.sha256(out.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()
            # Ragged: rank r contributes count + r rows of 2 elements.
            name = f"allgather.{str(dtype).split('.')[-1]}.{count}"
            mine = inputs(rank, dtype, 2 * (count + rank), "sum").reshape(-1, 2)
            out = hvd.allgather(mine, name=name)
            ref = torch.cat([inputs(r, dtype, 2 * (count + r), "sum").reshape(-1, 2) for r in range(size)])
            if not torch.equal(out, ref):
                errors.append(f"{name}: not every rank's rows in rank order")
            digests[name] = hashlib.sha256(out.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()
    time.sleep(0.2)  # the engine goes idle
    lone_before = dict(hvd_herring.counters())
    lone = hvd.allreduce(torch.ones(1024), name="lone", op=hvd.Sum)
    after = dict(hvd_herring.counters())
    if not torch.equal(lone, torch.full((1024,), float(size))):
        errors.append("lone: wrong sum")
    delta = {k: after[k] - before[k] for k in after}
    out = {"digests": digests, "errors": errors, "counters": delta,
           "lone": {k: after[k] - lone_before[k] for k in ("cycles", "idle_starts", "shm_negotiations")}}
    write_report(rank, out)


if __name__ == "__main__":
    main()
