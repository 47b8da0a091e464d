"""Runs inside every rank (horovodrun): the same allreduce with op=Sum and op=Adasum on the herring
engine, alternating per size so that both see the same machine, timed after a warm-up; rank 0
writes the medians to $HERRING_BENCH_OUT as JSON.

    horovodrun --gloo -np 4 -H localhost:4 python adasum_vs_sum.py"""

import json
import os
import statistics
import time

import torch

import hvd_herring.torch as hvd

SIZES = [4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20]
ITERATIONS = {4 << 10: 200, 64 << 10: 100, 1 << 20: 40, 16 << 20: 10, 64 << 20: 5}


def timed(tensor, op, name, iterations):
    times = []
    for _ in range(2):  # warm-up: the first calls negotiate and fill the response cache
        hvd.allreduce_(tensor, op=op, name=name)
    for _ in range(iterations):
        hvd.barrier()
        start = time.perf_counter()
        hvd.allreduce_(tensor, op=op, name=name)
        elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
        times.append(hvd.allreduce(elapsed, op=hvd.Max, name="adasum_bench.slowest").item())
    return statistics.median(times)


def main():
    hvd.init()
    torch.set_num_threads(1)
    results = []
    for size in SIZES:
        n = size // 4
        tensor = torch.randn(n, generator=torch.Generator().manual_seed(hvd.rank()))
        row = {"bytes": size}
        for op, label in ((hvd.Sum, "sum"), (hvd.Adasum, "adasum")):
            row[label] = timed(tensor.clone(), op, f"adasum_bench.{label}.{size}", ITERATIONS[size])
        results.append(row)
    if hvd.rank() == 0:
        with open(os.environ["HERRING_BENCH_OUT"], "w") as f:
            json.dump({"np": hvd.size(), "rows": results}, f)
    hvd.shutdown()


if __name__ == "__main__":
    main()
