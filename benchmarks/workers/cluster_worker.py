"""Runs inside every worker rank of a simulated-cluster benchmark launch (dedicated server processes
never return from hvd.init(), so only workers get past it). Runs the tasks of a plan file in
order; rank 0 appends one JSON record per task to the results file; a rank whose task fails
appends an error record naming itself and the task, then exits non-zero.

    cluster_worker.py --plan PLAN.json --out RESULTS.jsonl

Tasks (each checks its results against what every rank's inputs imply):
    allreduce  sum-allreduce of float32 buffers of each size; per-iteration wall-clock windows
               (time.time(), the machine's clock, the same in every simulated host) so the
               harness can line them up with the bytes its link sampler saw on every host
    gradset    a real model's gradient set through DistributedOptimizer (workloads.gradient_set)
    train      a communication-heavy training loop: per-step times and the server shares (PSLD's
               partition map) after every step; parameters checked identical on every rank
    hetero     heterogeneous workers: compute simulated as a sleep per sample, one rank group
               `slow_factor` times slower; a phase with the global batch split equally, then one
               with hvd.BatchSizeTuner; per-step times and batch sizes"""

import argparse
import gc
import json
import os
import statistics
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import comms  # noqa: E402
import workloads  # noqa: E402


def append(path, record):
    with open(path, "a") as f:      # one write per line: records of ranks do not interleave
        f.write(json.dumps(record) + "\n")


def _layout():
    import hvd_herring
    lay = hvd_herring.server_layout()
    return {"version": lay["version"], "shares": [round(s, 5) for s in lay["shares"]],
            "shard_ranks": list(lay["shard_ranks"]), "dedicated": bool(lay.get("dedicated"))}


def _counters(comm):
    c = comm.counters()
    return {k: v for k, v in (c or {}).items() if isinstance(v, (int, float))}


def _check_identical(comm, model, what):
    """Parameters must be the same on every rank after data-parallel training."""
    checksum = sum(float(p.detach().double().sum()) for p in model.parameters())
    hi, lo = comm.max_of(checksum), -comm.max_of(-checksum)
    if abs(hi - lo) > 1e-9 * max(1.0, abs(hi)):
        raise RuntimeError(f"rank {comm.rank}: {what}: parameters differ across ranks after training "
                           f"(parameter sums range from {lo!r} to {hi!r})")


def allreduce(comm, spec, emit):
    timing = spec.get("timing", {})
    warmup, iters = int(timing.get("warmup", 2)), int(timing.get("iters", 7))
    expected = comm.size * (comm.size + 1) / 2
    for nbytes in spec["sizes"]:
        buf = comm.make(nbytes // 4)
        times, windows = [], []
        before = _counters(comm)
        for i in range(warmup + iters):
            buf.fill_(comm.rank + 1)
            comm.barrier()
            wall, start = time.time(), time.perf_counter()
            comm.allreduce_(buf)
            took = comm.max_of(time.perf_counter() - start)   # done when the slowest rank is
            if i >= warmup:
                times.append(took)
                windows.append([wall, wall + took])
        after = _counters(comm)
        workloads._check_all_equal(buf, expected, f"rank {comm.rank}: allreduce of {nbytes} bytes")
        # Rank 0's engine counters over all iterations (warm-ups included), each of which is three
        # collectives: the barrier, the allreduce and the max of the times.
        delta = {k: after[k] - before.get(k, 0) for k in after if k != "partition_map_version"}
        # Wall-clock windows only for the link sampler: sub-millisecond iterations are shorter than
        # its period (the latency scenario turns them off).
        emit(dict(kind="allreduce", bytes=nbytes, times=times, median=statistics.median(times),
                  windows=windows if spec.get("windows", True) else [], counters_delta=delta, counted_iterations=warmup + iters,
                  collectives_per_iteration=3))
        del buf
        gc.collect()


def gradset(comm, spec, emit):
    workloads.gradient_set(comm, spec, emit)


def train(comm, spec, emit):
    """DistributedOptimizer over a wide MLP on a small batch: the gradients dominate the step."""
    import torch
    import horovod.torch as hvd
    model, loss = _mlp_task(torch, comm, spec)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9),
                                   named_parameters=model.named_parameters())
    _timed_steps(comm, spec, model, loss, opt, emit)
    _check_identical(comm, model, f"train {spec['id']}")


def _mlp_task(torch, comm, spec):
    """The training tasks' model (same on every rank) and loss on this rank's fixed batch."""
    torch.set_num_threads(1)
    widths, batch = spec["widths"], int(spec.get("batch", 8))
    torch.manual_seed(1234)
    model = workloads.mlp(torch, widths)
    g = torch.Generator().manual_seed(1000 + comm.rank)
    x, y = torch.randn(batch, widths[0], generator=g), torch.randn(batch, widths[-1], generator=g)
    return model, lambda: torch.nn.functional.mse_loss(model(x), y)


def _timed_steps(comm, spec, model, loss, opt, emit, **extra):
    step_times, walls, layouts = [], [], []
    comm.barrier()
    begin = time.time()
    for _ in range(int(spec["steps"])):
        start = time.perf_counter()
        opt.zero_grad()
        loss().backward()
        opt.step()
        step_times.append(time.perf_counter() - start)
        walls.append(time.time())
        layouts.append(_layout())
    params = sum(p.numel() for p in model.parameters())
    emit(dict(kind="train", params=params, bytes=4 * params, batch=int(spec.get("batch", 8)),
              step_times=step_times, begin=begin, walls=walls, layouts=layouts, counters=_counters(comm), **extra))


def train_r2sp_mode(comm, spec, emit):
    """The same model, data and step as train(), in R2SP training mode (hvd.R2SPTrainer): each
    worker's gradient is its own update, applied by the servers in round-robin turns."""
    import torch
    import horovod.torch as hvd
    model, loss = _mlp_task(torch, comm, spec)
    trainer = hvd.R2SPTrainer(model.parameters(), lr=1e-3, momentum=0.9)
    _timed_steps(comm, spec, model, loss, trainer, emit, mode="r2sp-mode")
    trainer.close()


def hetero(comm, spec, emit):
    """Each rank's compute is a real forward/backward of a small model plus a simulated cost of
    `sample_seconds` per sample (a sleep, so it does not compete for the two shared cores), times
    `slow_factor` on the ranks listed in `slow_ranks`. Phase `equal` splits the global batch
    equally; phase `tuned` lets hvd.BatchSizeTuner re-split it every `interval` steps from the
    speeds it measures. Gradients are weighted by batch size (the tuner's loss scale), so both
    phases train on the same global batch."""
    import torch
    import horovod.torch as hvd
    torch.set_num_threads(1)
    widths, steps = spec["widths"], int(spec["steps"])
    per_sample = float(spec["sample_seconds"]) * (float(spec["slow_factor"]) if comm.rank in spec["slow_ranks"] else 1.0)
    out = {}
    for phase in ("equal", "tuned"):
        torch.manual_seed(99)
        model = workloads.mlp(torch, widths)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1e-3),
                                       named_parameters=model.named_parameters())
        tuner = hvd.BatchSizeTuner(global_batch_size=int(spec["global_batch"]), interval=int(spec["interval"]),
                                   min_batch_size=1)
        g = torch.Generator().manual_seed(7 + comm.rank)
        step_times, sizes = [], []
        comm.barrier()
        for _ in range(steps):
            n = tuner.local_batch_size
            x, y = torch.randn(n, widths[0], generator=g), torch.randn(n, widths[-1], generator=g)
            start = time.perf_counter()
            opt.zero_grad()
            with tuner.timed():
                loss = torch.nn.functional.mse_loss(model(x), y) * tuner.loss_scale()
                loss.backward()
                time.sleep(per_sample * n)
            opt.step()
            if phase == "tuned":
                tuner.step()
            step_times.append(comm.max_of(time.perf_counter() - start))
            sizes.append(list(tuner.sizes))
        if sum(sizes[-1]) != int(spec["global_batch"]):
            raise RuntimeError(f"rank {comm.rank}: batch sizes {sizes[-1]} do not add up to the global batch "
                               f"{spec['global_batch']}")
        _check_identical(comm, model, f"hetero {spec['id']} phase {phase}")
        out[phase] = {"step_times": step_times, "sizes": sizes}
        del model, opt
    emit(dict(kind="hetero", global_batch=int(spec["global_batch"]), slow_ranks=spec["slow_ranks"],
              slow_factor=float(spec["slow_factor"]), sample_seconds=float(spec["sample_seconds"]),
              interval=int(spec["interval"]), phases=out))


TASKS = {"allreduce": allreduce, "gradset": gradset, "train": train, "train_r2sp_mode": train_r2sp_mode,
         "hetero": hetero}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--plan", required=True, help="JSON file: {'tasks': [{'kind': ..., 'id': ..., ...}]}")
    p.add_argument("--out", required=True, help="JSONL file rank 0 appends records to")
    args = p.parse_args()
    with open(args.plan) as f:
        plan = json.load(f)
    comm = comms.connect("horovod")
    common = {"np": comm.size, "launch": plan.get("launch", "")}
    for spec in plan["tasks"]:
        started = time.monotonic()

        def emit(rec, spec=spec, started=started):
            if comm.rank == 0:
                append(args.out, dict(common, task=spec["id"], wall_seconds=round(time.monotonic() - started, 2),
                                      layout=_layout(), **rec))

        try:
            TASKS[spec["kind"]](comm, spec, emit)
        except Exception as e:
            append(args.out, dict(common, task=spec["id"], rank=comm.rank, error=f"{type(e).__name__}: {e}",
                                  traceback=traceback.format_exc()[-3000:]))
            raise
    comm.hvd.shutdown()


if __name__ == "__main__":
    main()
