"""Runs inside every rank of a simulated cluster: REPS sum-allreduces of a float32 buffer of BYTES
bytes (rank r contributes r + 1 + k in repeat k), each checked on every rank, so the test can
count what crossed each link. Usage: eflops_traffic_worker.py BYTES REPS"""

import sys

import torch

import horovod.torch as hvd


def main():
    nbytes, reps = int(sys.argv[1]), int(sys.argv[2])
    hvd.init()
    n, r = hvd.size(), hvd.rank()
    buf = torch.empty(nbytes // 4, dtype=torch.float32)
    for k in range(reps):
        buf.fill_(r + 1 + k)
        hvd.allreduce_(buf, op=hvd.Sum, name="eflops.traffic")
        expected = n * (n + 1) / 2 + n * k
        bad = (buf != expected).nonzero()
        if bad.numel():
            i = int(bad[0])
            raise SystemExit(f"rank {r}: repeat {k}: element {i} is {buf[i].item()}, expected {expected} "
                             f"({bad.numel()} of {buf.numel()} differ)")
    hvd.shutdown()


if __name__ == "__main__":
    main()
