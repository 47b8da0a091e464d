"""Runs inside every rank of a job across (simulated) hosts: a burst of fused allreduces, then
HERRING_TEST_STEPS cached tiny allreduces one at a time, every result compared with the value
computed from every rank's input. Records in $HERRING_TEST_RESULTS/<rank>.json the negotiation
messages this rank sent and received over TCP per cycle in the steady state (the counters
control_messages_sent/received against cycles) and the time per tiny allreduce."""

import json
import os
import sys
import time

import torch

import horovod.torch as hvd
import hvd_herring


def main():
    hvd.init()
    n, r = hvd.size(), hvd.rank()
    steps = int(os.environ.get("HERRING_TEST_STEPS", "200"))
    # A burst of asynchronous allreduces (fused), new names first (coordinator rounds), then cached.
    for step in range(3):
        handles = [hvd.allreduce_async(torch.full((100 + i,), float(r * i + step)), op=hvd.Sum, name=f"burst.{i}")
                   for i in range(20)]
        for i, h in enumerate(handles):
            out = hvd.synchronize(h)
            expected = float(sum(q * i + step for q in range(n)))
            assert torch.equal(out, torch.full((100 + i,), expected)), (step, i, out[:4], expected)
    x = torch.full((16,), float(r + 1))
    expected = torch.full((16,), float(n * (n + 1) // 2))
    for _ in range(5):  # the first one is uncached
        assert torch.equal(hvd.allreduce(x, op=hvd.Sum, name="tiny"), expected)
    before = hvd_herring.counters()
    start = time.perf_counter()
    for i in range(steps):
        out = hvd.allreduce(x, op=hvd.Sum, name="tiny")
        assert torch.equal(out, expected), (i, out)
    seconds = time.perf_counter() - start
    after = hvd_herring.counters()
    delta = {k: after[k] - before[k] for k in after}
    out_dir = os.environ["HERRING_TEST_RESULTS"]
    with open(os.path.join(out_dir, f"{r}.json"), "w") as f:
        json.dump({"rank": r, "size": n, "steps": steps, "seconds_per_allreduce": seconds / steps,
                   "delta": delta, "counters": after}, f)
    hvd.shutdown()
    sys.exit(0)


if __name__ == "__main__":
    main()
