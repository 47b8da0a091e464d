"""Runs inside every rank under HOROVOD_CYCLE_TIME=60000 (a minute): a request that finds the
engine idle must start a cycle at once, so twenty back-to-back synchronous allreduces finish
(the old policy, one cycle per HOROVOD_CYCLE_TIME, would take twenty minutes); and a burst of
asynchronous allreduces submitted in a loop must be batched into a few cycles, not one each.
Also counts the cycles run by the waiting thread itself (HERRING_CALLER_RUNS_CYCLES), for small
allreduces, for ones of the size a caller runs at most where ranks outnumber CPUs
(_native.OVERSUBSCRIBED_CALLER_BYTES) and for ones of twice that; with HERRING_TEST_ONE_CPU the rank first confines itself to CPU 0 (as
taskset would), so that its host has more ranks than it has CPUs.
Writes <HERRING_TEST_RESULTS>/<rank>.json with the counters each phase used."""

import os

import torch

import horovod.torch as hvd
import hvd_herring
from hvd_herring import _native
from checks import write_report


def cycles():
    return hvd_herring.counters()["cycles"]


def waiter_cycles():
    return hvd_herring.counters()["waiter_cycles"]


def main():
    if os.environ.get("HERRING_TEST_ONE_CPU"):
        os.sched_setaffinity(0, {0})   # before init: the engine's threads inherit it
    hvd.init()
    size = hvd.size()
    out = {}
    hvd.allreduce(torch.ones(1), name="warm.up", op=hvd.Sum)

    before, before_waiter = cycles(), waiter_cycles()
    lone = [hvd.allreduce(torch.ones(1024), name=f"lone.{i}", op=hvd.Sum)[0].item() for i in range(20)]
    out["lone_sums"] = lone
    out["lone_cycles"] = cycles() - before
    out["lone_waiter_cycles"] = waiter_cycles() - before_waiter

    # The largest request a caller runs itself where ranks outnumber CPUs, then twice that.
    limit_floats = _native.OVERSUBSCRIBED_CALLER_BYTES // 4
    for label, floats in (("limit", limit_floats), ("large", 2 * limit_floats)):
        before_waiter = waiter_cycles()
        out[f"{label}_sums"] = [hvd.allreduce(torch.ones(floats), name=f"{label}.{i}", op=hvd.Sum)[-1].item()
                                for i in range(10)]
        out[f"{label}_waiter_cycles"] = waiter_cycles() - before_waiter
    out["cpus"] = len(os.sched_getaffinity(0))

    hvd.barrier()
    before = cycles()
    handles = [hvd.allreduce_async(torch.full((4,), float(i)), name=f"burst.{i}", op=hvd.Sum) for i in range(200)]
    out["burst_ok"] = all(hvd.synchronize(h)[0].item() == i * size for i, h in enumerate(handles))
    out["burst_cycles"] = cycles() - before
    write_report(hvd.rank(), out)


if __name__ == "__main__":
    main()
