"""Runs inside both ranks: puts them on one CPU, as the scheduler sometimes leaves two ranks, and
checks what the next synchronous allreduce does about it (HERRING_SPREAD_CPUS). Rank 1 confines
itself to the first CPU of the process's mask before init (its engine threads inherit that, so
whichever of its threads runs a cycle runs there, and its vectors say so). Each trial, after both
were idle: rank 0's thread moves to that CPU (confined to it, then given its whole mask back,
which leaves it there until something moves it) and allreduces, while rank 1 sleeps a moment
before it does (asleep, it gives the scheduler no reason to move rank 0: what moves it is the
engine, seeing in rank 1's vector that both run on that CPU). Each rank records the engine's
cpu_moves and its thread's mask afterwards. Writes <HERRING_TEST_RESULTS>/<rank>.json."""

import os
import time

import torch

import horovod.torch as hvd
import hvd_herring
from checks import write_report

TRIALS = 5


def cpu_moves():
    return hvd_herring.counters()["cpu_moves"]


def main():
    mask = os.sched_getaffinity(0)
    first = min(mask)
    holder = os.environ.get("HOROVOD_RANK") == "1"
    if holder:
        os.sched_setaffinity(0, {first})
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    out = {"trials": [], "sums": []}
    hvd.allreduce(torch.ones(1), name="warm.up", op=hvd.Sum)
    for trial in range(TRIALS):
        # Both idle (longer than ShmBitsExchange::kMoveInterval, so that every trial may move).
        hvd.allreduce(torch.ones(1), name="pause", op=hvd.Sum)
        time.sleep(0.01)
        if holder:
            time.sleep(0.005)
        else:
            os.sched_setaffinity(0, {first})   # pid 0: this thread only; it moves there now
            os.sched_setaffinity(0, mask)      # and stays until something moves it
        before = cpu_moves()
        out["sums"].append(hvd.allreduce(torch.ones(1024), name="after", op=hvd.Sum)[0].item())
        out["trials"].append({"moves": cpu_moves() - before, "mask": sorted(os.sched_getaffinity(0))})
    out.update(first=first, mask=sorted(mask), size=size)
    write_report(rank, out)


if __name__ == "__main__":
    main()
