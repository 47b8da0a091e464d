"""Runs inside every rank (4 ranks on this machine's 2 cores: a peer on its way to the next call
is often late). Two phases, each with the engine's counters before and after:

- lockstep: every rank calls the same cached allreduce, one at a time, LOCKSTEP times. A loop that
  a peer's cycle invites while this rank's thread is still on its way waits for it instead of
  joining empty-handed (IdleJoinPatience), so the phase takes about one cycle per call;
- helped: ranks 0 and 1 allreduce on their own process set while ranks 2 and 3 sleep. Every such
  cycle needs the sleepers' loops to join with nothing of their own, whatever the first phase
  taught their patience.

Writes <HERRING_TEST_RESULTS>/<rank>.json."""

import time

import torch

import horovod.torch as hvd
import hvd_herring
from checks import write_report

LOCKSTEP = 300
HELPED = 40
KEYS = ("cycles", "empty_joins", "wasted_empty_joins")


def counters():
    c = hvd_herring.counters()
    return {k: c[k] for k in KEYS}


def delta(before, after):
    return {k: after[k] - before[k] for k in KEYS}


def main():
    pair = hvd.ProcessSet([0, 1])
    hvd.init(process_sets=[pair])
    rank, size = hvd.rank(), hvd.size()
    out = {"lockstep_calls": LOCKSTEP, "helped_calls": HELPED}
    t = torch.zeros(16)
    hvd.allreduce_(t, name="lockstep", op=hvd.Sum)  # negotiated once, cached from here on

    before = counters()
    sums = []
    for i in range(LOCKSTEP):
        t.fill_(rank + i)
        hvd.allreduce_(t, name="lockstep", op=hvd.Sum)
        sums.append(t[0].item())
    out["lockstep"] = delta(before, counters())
    out["lockstep_ok"] = sums == [float(size * i + size * (size - 1) // 2) for i in range(LOCKSTEP)]

    hvd.barrier()
    before = counters()
    if rank in (0, 1):
        got = [hvd.allreduce(torch.full((4,), float(rank + i)), name="pair", op=hvd.Sum, process_set=pair)[0].item()
               for i in range(HELPED)]
        out["helped_ok"] = got == [float(2 * i + 1) for i in range(HELPED)]
    else:
        # Long enough for the pair's calls to end while this rank's threads submit nothing.
        time.sleep(4)
    out["helped"] = delta(before, counters())
    hvd.barrier()
    write_report(rank, out)


if __name__ == "__main__":
    main()
