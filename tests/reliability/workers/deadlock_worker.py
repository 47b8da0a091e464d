"""Runs inside every rank: the ranks diverge so that each waits on a collective that only another
(itself waiting) could complete; every rank must raise the deadlock error naming every rank and
what it waits on, and the job must go on afterwards. Then a stall that is not a deadlock (one
rank computes for longer than the deadlock time while the others wait) must complete.

    python deadlock_worker.py torch|tensorflow

Writes <HERRING_TEST_RESULTS>/<rank>.json with what each phase saw."""

import os
import sys
import time
from checks import write_report


def main():
    framework = sys.argv[1]
    if framework == "torch":
        import torch
        import horovod.torch as hvd

        def allreduce(name):
            return hvd.allreduce(torch.ones(4), name=name, op=hvd.Sum).tolist()
    else:
        import tensorflow as tf
        import horovod.tensorflow as hvd

        def allreduce(name):
            return hvd.allreduce(tf.ones(4), name=name, op=hvd.Sum).numpy().tolist()

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    deadlock_seconds = float(os.environ["HERRING_DEADLOCK_TIME_SECONDS"])
    outcome = {"rank": rank}

    allreduce("warm.up")  # every rank in step, the cache holding one entry
    start = time.monotonic()
    try:
        # Each rank waits on a tensor of its own name: nobody else will ever submit it.
        allreduce(f"diverged.by.rank{rank}")
        outcome["deadlock_error"] = None
    except Exception as e:  # noqa: BLE001 - the test checks the type and the text
        outcome["deadlock_error"] = f"{type(e).__name__}: {e}"
    outcome["deadlock_seconds"] = time.monotonic() - start

    # The job goes on: the same collective on every rank completes with the right sum.
    outcome["after"] = allreduce("back.in.step")

    # A stall is not a deadlock: the last rank computes for longer than the deadlock time while
    # the others wait on a collective it will submit.
    start = time.monotonic()
    if rank == size - 1:
        time.sleep(deadlock_seconds * 1.5)
    try:
        outcome["stalled"] = allreduce("slow.rank")
    except Exception as e:  # noqa: BLE001
        outcome["stalled"] = f"{type(e).__name__}: {e}"
    outcome["stall_seconds"] = time.monotonic() - start

    write_report(rank, outcome)
    hvd.shutdown()


if __name__ == "__main__":
    main()
