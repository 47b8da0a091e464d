"""Runs inside every rank, with or without HOROVOD_AUTOTUNE=1 (tests/horovod_api/test_autotune.py and
benchmarks/autotune): training-like steps (HERRING_AUTOTUNE_WORKLOAD: `tiny`, 1000 one-element
allreduces submitted then awaited, or `gradset`, ResNet-50's 161 gradients; each step refills the
same tensors and reduces them in place, as DistributedOptimizer does its .grads), every result checked
against its reference, until the ranks agree that no autotuner is searching (at once without
HOROVOD_AUTOTUNE; at most HERRING_AUTOTUNE_MAX_STEPS), then HERRING_AUTOTUNE_AFTER_STEPS timed
steps under the settings in force. Writes <HERRING_TEST_RESULTS>/<rank>.json: the steps searched,
the settings in force and when they last switched, the step times during and after the search."""

import json
import os
import sys
import time

import torch

import horovod.torch as hvd
import hvd_herring

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gradient_sets import resnet50_shapes  # noqa: E402


def tensors_for(workload):
    """The step's gradients: allocated once and reduced in place every step, as DistributedOptimizer
    reduces each parameter's .grad (a fresh 100 MB set per step measured the allocator as much as
    the engine)."""
    if workload == "tiny":
        return [torch.empty(1) for _ in range(1000)]
    return [torch.empty(shape) for _, shape in resnet50_shapes()]


def step(workload, tensors, rank, size):
    for i, t in enumerate(tensors):
        t.fill_(float(rank + i))
    handles = [hvd.allreduce_async_(t, name=f"{workload}.{i}", op=hvd.Sum) for i, t in enumerate(tensors)]
    ranks_sum = size * (size - 1) / 2
    for i, h in enumerate(handles):
        out = hvd.synchronize(h)
        expected = size * i + ranks_sum
        if not torch.all(out == expected):
            raise AssertionError(f"rank {rank}: {workload}.{i} = {out.flatten()[0].item()}, expected {expected}")


def main():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    workload = os.environ.get("HERRING_AUTOTUNE_WORKLOAD", "tiny")
    tensors = tensors_for(workload)
    max_steps = int(os.environ.get("HERRING_AUTOTUNE_MAX_STEPS", "3000"))
    times, versions = [], []
    steps = 0
    while steps < max_steps:
        t0 = time.perf_counter()
        step(workload, tensors, rank, size)
        times.append(time.perf_counter() - t0)
        steps += 1
        c = hvd_herring.counters()
        versions.append(c["autotune_version"])
        # Every rank stops at the same step: when no rank is still searching.
        still = hvd.allreduce(torch.tensor([float(c["autotune_active"])]), name="still.tuning", op=hvd.Max)
        if still.item() == 0:
            break
    settled_at = steps
    # Steps under the settled settings, timed (the benchmark's figure; the test asserts none).
    after = []
    for _ in range(int(os.environ.get("HERRING_AUTOTUNE_AFTER_STEPS", "20"))):
        t0 = time.perf_counter()
        step(workload, tensors, rank, size)
        after.append(time.perf_counter() - t0)
    c = hvd_herring.counters()
    out = {
        "steps": settled_at,
        "search_step_times": times,
        "after_step_times": after,
        "versions": versions,
        "settings": {k: c[k] for k in ("autotune_active", "autotune_version", "autotune_applied_cycle",
                                        "tuned_fusion_threshold_bytes", "tuned_cycle_time_us",
                                        "tuned_small_message_bytes", "tuned_allreduce", "tuned_tcp_streams")},
    }
    with open(os.path.join(os.environ["HERRING_TEST_RESULTS"], f"{rank}.json"), "w") as f:
        json.dump(out, f)
    hvd.shutdown()


if __name__ == "__main__":
    main()
