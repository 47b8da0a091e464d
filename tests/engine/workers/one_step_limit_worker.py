"""Runs inside every rank: synchronous allreduces of 8 KiB, 32 KiB and 8 MiB, each many times, with
the engine's counters read around each size, so that the test can tell which path each took (the
one-step exchange, the pipeline, and which pipelined route) against how many local ranks share the
host's cores. Every result is compared with the reference. HERRING_TEST_BIND_RANK=<r>: rank r binds
itself to one core before hvd.init(). Writes <HERRING_TEST_RESULTS>/<rank>.json."""

import os

import torch

import horovod.torch as hvd
import hvd_herring
from checks import write_report

REPEATS = 20
SIZES = (8 << 10, 32 << 10, 8 << 20)
COUNTERS = ("one_step_allreduces", "shm_chunks", "peer_output_reads", "cross_memory_allreduces")


def main():
    if os.environ.get("HERRING_TEST_BIND_RANK", "none") == os.environ.get("HOROVOD_RANK"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core: its host mates keep theirs
    hvd.init()
    n, r = hvd.size(), hvd.rank()
    report = {"local_size": hvd.local_size(), "cpus": len(os.sched_getaffinity(0)), "sizes": {}}
    for nbytes in SIZES:
        before = dict(hvd_herring.counters())
        for i in range(REPEATS):
            t = torch.full((nbytes // 4,), float(r + 1 + i))
            hvd.allreduce_(t, op=hvd.Sum, name=f"limit.{nbytes}")
            expected = n * (n + 1) / 2 + n * i
            assert torch.all(t == expected), (nbytes, i, t[:4], expected)
        after = dict(hvd_herring.counters())
        report["sizes"][str(nbytes)] = {k: after[k] - before[k] for k in COUNTERS}
    write_report(r, report)
    hvd.shutdown()


if __name__ == "__main__":
    main()
