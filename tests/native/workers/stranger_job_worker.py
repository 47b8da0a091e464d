"""Runs inside every rank: the job that strangers attack (tests/native/test_security.py). Allreduces in a
loop, every result checked against the reference computed from every rank's input, until the
test drops a file named `stop` in $HERRING_TEST_RESULTS (or HERRING_TEST_MAX_SECONDS pass).

All ranks stop at the same step: each step also allreduces "has this rank seen the stop file",
with Max. Files written in $HERRING_TEST_RESULTS:
  <rank>.ready  {"pid": ..} once the mesh is complete and a first step succeeded
  <rank>.json   steps run, wrong results (there must be none), the first/last step times
                (CLOCK_MONOTONIC, comparable with the test's) and the error if any
"""

import json
import os
import sys
import time

import torch

import horovod.torch as hvd

# Sizes: small ones fused together, one that streams through two TCP chunks; small enough that
# the job runs hundreds of steps while the strangers knock.
SIZES = [1, 1000, 50_000, 400_000]


def inputs(rank, step):
    # Integers below 2**24 in float32: the sum over ranks is exact, so results compare bitwise.
    return [torch.arange(n, dtype=torch.float32) % 1000 * (rank + 1) + step % 97 for n in SIZES]


def reference(size, step):
    total = sum(range(1, size + 1))
    return [torch.arange(n, dtype=torch.float32) % 1000 * total + size * (step % 97) for n in SIZES]


def main():
    hvd.init()
    results = os.environ["HERRING_TEST_RESULTS"]
    max_seconds = float(os.environ.get("HERRING_TEST_MAX_SECONDS", "120"))
    rank, size = hvd.rank(), hvd.size()
    outcome = {"rank": rank, "steps": 0, "wrong": [], "error": None}
    start = time.monotonic()
    try:
        step = 0
        while True:
            tensors = inputs(rank, step)
            handles = [hvd.allreduce_async_(t, op=hvd.Sum, name=f"stranger.grad.{i}") for i, t in enumerate(tensors)]
            for h in handles:
                hvd.synchronize(h)
            for i, (got, want) in enumerate(zip(tensors, reference(size, step))):
                if not torch.equal(got, want):
                    bad = (got != want).nonzero()[:4].flatten().tolist()
                    outcome["wrong"].append(f"step {step} tensor {i}: wrong at elements {bad}")
            now = time.monotonic()
            outcome.setdefault("first_step_at", now)
            outcome["last_step_at"] = now
            step += 1
            outcome["steps"] = step
            if step == 1:
                with open(os.path.join(results, f"{rank}.ready"), "w") as f:
                    json.dump({"pid": os.getpid()}, f)
            stop_here = os.path.exists(os.path.join(results, "stop")) or now - start > max_seconds
            flag = hvd.allreduce(torch.tensor([1.0 if stop_here else 0.0]), op=hvd.Max, name="stranger.stop")
            if flag.item() > 0:
                break
    except Exception as e:  # noqa: BLE001 - what the user would see is the point
        outcome["error"] = f"{type(e).__name__}: {e}"
    with open(os.path.join(results, f"{rank}.json"), "w") as f:
        json.dump(outcome, f)
    sys.exit(1 if outcome["error"] or outcome["wrong"] else 0)


if __name__ == "__main__":
    main()
