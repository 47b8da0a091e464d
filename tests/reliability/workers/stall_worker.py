"""Runs inside every rank: steady-state allreduces, then rank 2 skips one tensor and submits one
the others never submit. The stall inspector must name the missing ranks and tensors, and with
HOROVOD_STALL_SHUTDOWN_TIME_SECONDS end the job with that report on every rank."""

import sys
import time

import torch

import horovod.torch as hvd
from checks import write_report


def step(names):
    for h in [hvd.allreduce_async(torch.ones(10), name=n) for n in names]:
        hvd.synchronize(h)


def main():
    hvd.init()
    outcome = {"rank": hvd.rank()}
    start = time.monotonic()
    try:
        for _ in range(3):
            step(["grad.0", "grad.1"])  # cached from the second step on
        start = time.monotonic()
        if hvd.rank() == 2:
            step(["grad.0"])  # hangs: the others wait for grad.1 too ... but grad.0 completes
        else:
            step(["grad.0", "grad.1"])
        outcome["error"] = None
    except Exception as e:  # noqa: BLE001
        outcome["error"] = f"{type(e).__name__}: {e}"
    outcome["seconds"] = time.monotonic() - start
    if hvd.rank() == 2 and outcome["error"] is None:
        # Rank 2 got grad.0 (everyone submitted it) and now submits what nobody else does.
        try:
            hvd.allreduce(torch.ones(1), name="only.rank2")
            outcome["error"] = None
        except Exception as e:  # noqa: BLE001
            outcome["error"] = f"{type(e).__name__}: {e}"
        outcome["seconds"] = time.monotonic() - start
    import hvd_herring
    try:
        outcome["counters"] = hvd_herring.counters()
    except Exception:  # noqa: BLE001 - the engine may be gone
        outcome["counters"] = None
    write_report(hvd.rank(), outcome)
    sys.exit(1 if outcome["error"] else 0)


if __name__ == "__main__":
    main()
