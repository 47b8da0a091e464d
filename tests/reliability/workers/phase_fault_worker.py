"""Runs inside every rank: allreduces in a loop (fused buffers crossing hosts when the ranks are
split over simulated hosts) while HERRING_FAULT makes one rank fail at one phase. Survivors record
the error they saw and how long it took, in $HERRING_TEST_RESULTS/<rank>.json, then exit non-zero.
SIGTERM from horovodrun (which stops the others once one failed) is deferred while reporting.
HERRING_TEST_ZERO_COPY=1 puts the tensors in zero-copy memory (one host: reduced in place)."""

import os
import signal
import sys
import time

import torch

import horovod.torch as hvd
from checks import write_report

signal.signal(signal.SIGTERM, lambda *_: None)


def main():
    hvd.init()
    outcome = {"rank": hvd.rank()}
    start = None
    try:
        make = hvd.zero_copy_empty if os.environ.get("HERRING_TEST_ZERO_COPY") == "1" else torch.empty
        grads = [make(50_000 + i).fill_(1.0) for i in range(6)]
        for step in range(200):
            start = time.monotonic()
            handles = [hvd.allreduce_async_(g, op=hvd.Sum, name=f"g.{i}") for i, g in enumerate(grads)]
            for h in handles:
                hvd.synchronize(h)
            for g in grads:
                g.fill_(1.0)
        outcome["error"] = None
    except Exception as e:  # noqa: BLE001 - what the user sees is the point
        outcome["error"] = f"{type(e).__name__}: {e}"
        outcome["seconds_to_error"] = time.monotonic() - start
    write_report(hvd.rank(), outcome)
    sys.exit(1 if outcome["error"] else 0)


if __name__ == "__main__":
    main()
