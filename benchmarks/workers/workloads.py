"""The benchmark workloads, written once over the Comm interface (comms.py) so every stack runs the
same code. Each hands its records (dicts) to `emit` as soon as they are measured, and checks its
results against the values every rank's inputs imply, raising with what differed when wrong.

Timing: an iteration starts after a barrier and its time is the slowest rank's (a collective is
done when the last rank has its result); the barrier and the max are outside the timed region.
After `warmup` iterations (and, when `warmup_seconds` is set, as many more as fill that much wall
time), the number of timed ones is chosen from the last warm-up time so that each measurement takes
about `budget` seconds (at least min_iters, at most max_iters); every rank gets the same count
because the warm-up time it uses is itself the result of a collective.

Why a warm-up in seconds: on this machine (4 ranks on 2 cores) the first ~0.1 s of back-to-back
small collectives in a job ran at about twice the steady state, on whichever size came first and
whatever the count of warm-up iterations: herring np=4, sizes in the order 16, 4, 16, 4 KiB
measured 89, 40, 45, 40 us; the first 16 KiB's iterations ran at ~100 us for their first 0.1 s
and ~55 us after. A count alone cannot cover a phase measured in time."""

import gc
import math
import statistics
import time

import gradient_sets


def _torch():
    import torch
    torch.set_num_threads(1)
    return torch


def timed_loop(comm, prepare, body, timing):
    warmup = int(timing.get("warmup", 2))
    min_iters, max_iters = int(timing.get("min_iters", 5)), int(timing.get("max_iters", 100))
    budget = float(timing.get("budget", 2.0))
    warmup_seconds = float(timing.get("warmup_seconds", 0.0))

    def one():
        prepare()
        comm.barrier()
        start = time.perf_counter()
        body()
        return comm.max_of(time.perf_counter() - start)

    last = None
    for _ in range(warmup):
        last = one()
    if warmup_seconds > 0:
        started = time.perf_counter()
        # The elapsed time is itself a collective's result, so every rank stops after the same
        # iteration.
        while comm.max_of(time.perf_counter() - started) < warmup_seconds:
            last = one()
    iters = min_iters if last is None else max(min_iters, min(max_iters, math.ceil(budget / max(last, 1e-6))))
    return [one() for _ in range(iters)]


def _summary(times):
    qs = statistics.quantiles(times, n=4, method="inclusive") if len(times) >= 2 else [times[0]] * 3
    return {"times": times, "median": statistics.median(times), "p25": qs[0], "p75": qs[2]}


def _fill(buf, value):
    (buf.fill_ if hasattr(buf, "fill_") else buf.fill)(value)


def _check_all_equal(buf, expected, what):
    import numpy as np
    arr = buf.numpy() if hasattr(buf, "numpy") else buf
    bad = np.flatnonzero(arr != expected)
    if bad.size:
        i = int(bad[0])
        raise RuntimeError(f"{what}: element {i} is {arr[i]!r}, expected {expected!r} "
                           f"({bad.size} of {arr.size} elements differ)")


def allreduce_sweep(comm, spec, emit):
    """Sum-allreduce of float32 buffers of each size, in place; inputs are rank+1 everywhere."""
    expected = comm.size * (comm.size + 1) / 2
    for nbytes in spec["sizes"]:
        buf = comm.make(max(1, nbytes // 4))
        times = timed_loop(comm, lambda: _fill(buf, comm.rank + 1), lambda: comm.allreduce_(buf),
                           spec.get("timing", {}))
        _check_all_equal(buf, expected, f"rank {comm.rank}: allreduce of {nbytes} bytes")
        emit(dict(kind="allreduce", bytes=nbytes, **_summary(times)))
        del buf
        gc.collect()


def tiny_tensors(comm, spec, emit):
    """`count` tiny allreduces per step, all submitted before waiting for any (negotiation-bound)."""
    count, elements = int(spec.get("count", 1000)), int(spec.get("elements", 1))
    tensors = [comm.make(elements) for _ in range(count)]

    def prepare():
        for t in tensors:
            _fill(t, comm.rank + 1)

    before = comm.counters()
    times = timed_loop(comm, prepare, lambda: comm.allreduce_many_(tensors), spec.get("timing", {}))
    after = comm.counters()
    expected = comm.size * (comm.size + 1) / 2
    for i, t in enumerate(tensors):
        _check_all_equal(t, expected, f"rank {comm.rank}: tiny tensor bench.tiny.{i}")
    rec = dict(kind="tiny", count=count, bytes=4 * elements, **_summary(times))
    if before is not None and after is not None:
        rec["counters"] = {k: after[k] - before.get(k, 0) for k in after if isinstance(after[k], (int, float))}
    emit(rec)


def _measure_training(comm, make_model, make_batch, loss_of, timing, distributed, lr=0.01, momentum=0.0):
    """Steps of zero_grad -> forward -> backward -> step; returns (times, model, wrapped)."""
    torch = _torch()
    torch.manual_seed(1234)                     # the same initial parameters on every rank
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    if distributed:
        d = comm.distribute(model, opt)
    else:
        from comms import Distributed
        d = Distributed(model, opt.step)
    batch = make_batch()

    def zero_grad():
        # Gradients stay allocated between steps and are zeroed in place (set_to_none=False):
        # freeing and reallocating hundreds of MB per step would mostly measure the allocator's
        # page faults, the same on every stack, and make every step noisier.
        for p in model.parameters():
            if p.grad is not None:
                p.grad.zero_()

    def body():
        loss_of(d.forward, batch).backward()
        d.step()

    times = timed_loop(comm, zero_grad, body, timing)
    return times, model, d


def gradient_set(comm, spec, emit):
    """The gradient set of a real model submitted as DistributedOptimizer would (one allreduce per
    gradient, asynchronously, in reverse layer order, then synchronize all) - or as DDP buckets it
    on torch-gloo. Every rank's gradients are rank+1; after the step each must be their average."""
    torch = _torch()
    name = spec["model"]
    info = gradient_sets.describe(name)
    coef = torch.tensor(float(comm.rank + 1))
    make_model = lambda: gradient_sets.gradient_set_module(name)  # noqa: E731
    loss_of = lambda forward, c: forward(c)  # noqa: E731
    times, model, d = _measure_training(comm, make_model, lambda: coef, loss_of, spec.get("timing", {}), True)
    expected = (comm.size + 1) / 2
    for pname, p in model.named_parameters():
        _check_all_equal(p.grad, expected, f"rank {comm.rank}: gradient {pname} of {name}")
    del model, d
    gc.collect()
    base, model, d = _measure_training(comm, make_model, lambda: coef, loss_of, spec.get("baseline_timing", {}), False)
    del model, d
    gc.collect()
    rec = dict(kind="gradset", model=name, bytes=4 * info["params"], **info, **_summary(times))
    rec["baseline"] = _summary(base)
    emit(rec)


def mlp(torch, widths):
    """Linear layers of these widths with a ReLU between each two."""
    layers = []
    for i, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
        layers.append(torch.nn.Linear(a, b))
        if i < len(widths) - 2:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def mlp_training(comm, spec, emit):
    """A training loop where communication dominates: a wide MLP (tens of millions of parameters)
    on a small batch, SGD with momentum. Parameters must stay identical on every rank."""
    torch = _torch()
    widths, batch = spec["widths"], int(spec.get("batch", 8))

    def make_model():
        return mlp(torch, widths)

    def make_batch():
        g = torch.Generator().manual_seed(1000 + comm.rank)   # each rank its own data
        return torch.randn(batch, widths[0], generator=g), torch.randn(batch, widths[-1], generator=g)

    loss_of = lambda forward, xy: torch.nn.functional.mse_loss(forward(xy[0]), xy[1])  # noqa: E731
    times, model, d = _measure_training(comm, make_model, make_batch, loss_of, spec.get("timing", {}), True,
                                        momentum=0.9)
    params = sum(p.numel() for p in model.parameters())
    checksum = sum(float(p.detach().double().sum()) for p in model.parameters())
    hi, lo = comm.max_of(checksum), -comm.max_of(-checksum)
    if abs(hi - lo) > 1e-6 * max(1.0, abs(hi)):
        raise RuntimeError(f"rank {comm.rank}: parameters diverged across ranks after training "
                           f"(parameter sums range from {lo!r} to {hi!r})")
    del model, d
    gc.collect()
    base, model, d = _measure_training(comm, make_model, make_batch, loss_of, spec.get("baseline_timing", {}),
                                       False, momentum=0.9)
    del model, d
    gc.collect()
    rec = dict(kind="train", model="mlp-" + "-".join(map(str, widths)), params=params, batch=batch,
               bytes=4 * params, **_summary(times))
    rec["baseline"] = _summary(base)
    emit(rec)


def sync_batch_norm_training(comm, spec, emit):
    """A step bound by synchronized batch norm: a small convolutional net whose three batch-norm
    layers are the stack's SyncBatchNorm, on a small batch per rank (one small collective per
    layer forward, one backward, and the gradients' allreduce). Parameters and running statistics
    must stay identical on every rank."""
    torch = _torch()
    batch, image, widths = int(spec.get("batch", 8)), int(spec.get("image", 32)), spec.get("widths", [16, 32, 32])

    def make_model():
        layers, channels = [], 3
        for i, width in enumerate(widths):
            layers += [torch.nn.Conv2d(channels, width, 3, stride=1 if i == 0 else 2, padding=1, bias=False),
                       comm.sync_batch_norm(width), torch.nn.ReLU()]
            channels = width
        layers += [torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(channels, 10)]
        return torch.nn.Sequential(*layers)

    def make_batch():
        g = torch.Generator().manual_seed(2000 + comm.rank)   # each rank its own samples
        return torch.randn(batch, 3, image, image, generator=g), torch.randint(0, 10, (batch,), generator=g)

    loss_of = lambda forward, xy: torch.nn.functional.cross_entropy(forward(xy[0]), xy[1])  # noqa: E731
    times, model, d = _measure_training(comm, make_model, make_batch, loss_of, spec.get("timing", {}), True,
                                        momentum=0.9)
    state = list(model.parameters()) + [b for b in model.buffers() if b.is_floating_point()]
    checksum = sum(float(t.detach().double().sum()) for t in state)
    hi, lo = comm.max_of(checksum), -comm.max_of(-checksum)
    if abs(hi - lo) > 1e-6 * max(1.0, abs(hi)):
        raise RuntimeError(f"rank {comm.rank}: parameters or running statistics diverged across ranks "
                           f"(sums range from {lo!r} to {hi!r})")
    params = sum(p.numel() for p in model.parameters())
    rec = dict(kind="syncbn", model="conv-" + "-".join(map(str, widths)), params=params, batch=batch,
               image=image, bytes=4 * params, **_summary(times))
    del model, d
    gc.collect()
    emit(rec)


WORKLOADS = {"allreduce": allreduce_sweep, "tiny": tiny_tensors, "gradset": gradient_set, "train": mlp_training,
             "syncbn": sync_batch_norm_training}
