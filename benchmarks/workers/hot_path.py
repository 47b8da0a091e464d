"""Runs inside every rank (torchrun): the per-call time of one small synchronous collective on each
front, `dist.all_reduce(t)` (torch.distributed on "herring") and `hvd.allreduce_(t)` (Horovod's API
on the same engine), 4 KiB of float32 by default. Prints one line per front on rank 0:
`<front> np=<n> median <us> us` (the median of the medians of several blocks of calls)."""

import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

import hvd_herring.torch.distributed  # noqa: F401  (registers "herring")


def median_us(call, blocks, per_block):
    medians = []
    for _ in range(blocks):
        times = []
        for _ in range(per_block):
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
        medians.append(statistics.median(times))
    return 1e6 * statistics.median(medians)


def main():
    elements = int(sys.argv[1]) // 4 if len(sys.argv) > 1 else 1024
    blocks, per_block = int(os.environ.get("HOT_PATH_BLOCKS", "7")), int(os.environ.get("HOT_PATH_CALLS", "300"))
    dist.init_process_group("herring")
    import hvd_herring.torch as hvd
    hvd.init()  # the engine torch.distributed started
    t = torch.ones(elements)
    fronts = {"dist.all_reduce": lambda: dist.all_reduce(t), "hvd.allreduce_": lambda: hvd.allreduce_(t, op=hvd.Sum)}
    for call in fronts.values():  # warm-up: the response cache and the code paths
        for _ in range(200):
            call()
    results = {name: median_us(call, blocks, per_block) for name, call in fronts.items()}
    if dist.get_rank() == 0:
        for name, us in results.items():
            print(f"{name} np={dist.get_world_size()} median {us:.2f} us", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
