"""Runs inside every rank of the soak (tests/reliability/test_soak.py, scripts/soak.sh): SOAK_STEPS steps of
SOAK_TENSORS allreduces each (sizes from 1 element to 64 Ki elements, like the gradients of a small
model), every result checked. Every SOAK_SAMPLE_EVERY steps it records its resident memory, open
file descriptors, threads and the time per step, so a leak of memory, descriptors or threads
shows as a slope. Writes $HERRING_TEST_RESULTS/<rank>.json."""

import os
import sys
import time

import torch

import horovod.torch as hvd
from checks import write_report


def proc_status(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def sample(step, step_seconds):
    return {"step": step, "t": time.monotonic(), "rss_kb": proc_status("VmRSS"), "fds": len(os.listdir("/proc/self/fd")),
            "threads": proc_status("Threads"), "ms_per_step": round(step_seconds * 1000, 3)}


def main():
    steps = int(os.environ.get("SOAK_STEPS", "10000"))
    n_tensors = int(os.environ.get("SOAK_TENSORS", "200"))
    every = int(os.environ.get("SOAK_SAMPLE_EVERY", "500"))
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    # Sizes cycle through 1, 4, 16, ... 64 Ki elements: fused small ones and chunked large ones.
    sizes = [4 ** (i % 9) for i in range(n_tensors)]
    tensors = [torch.zeros(n) for n in sizes]
    names = [f"soak.grad.{i}" for i in range(n_tensors)]
    rank_sum = sum(range(1, size + 1))
    outcome = {"rank": rank, "size": size, "steps": 0, "tensors": n_tensors, "elements_per_step": sum(sizes),
               "wrong": [], "error": None, "samples": []}
    start = time.monotonic()
    window_start, window_steps = start, 0
    try:
        for step in range(steps):
            value = (rank + 1) * (1 + step % 5)
            for t in tensors:
                t.fill_(value)
            handles = [hvd.allreduce_async_(t, op=hvd.Sum, name=n) for t, n in zip(tensors, names)]
            for h in handles:
                hvd.synchronize(h)
            expected = rank_sum * (1 + step % 5)
            for i, t in enumerate(tensors):
                if not bool((t == expected).all()):
                    if len(outcome["wrong"]) < 20:
                        outcome["wrong"].append(f"step {step} tensor {i}: {t[:4].tolist()} != {expected}")
            outcome["steps"] = step + 1
            window_steps += 1
            if step == 0 or (step + 1) % every == 0:
                now = time.monotonic()
                outcome["samples"].append(sample(step + 1, (now - window_start) / window_steps))
                window_start, window_steps = now, 0
        # Nobody leaves (closing its connections) before everyone took its last sample.
        hvd.allreduce(torch.zeros(1), name="soak.done")
    except Exception as e:  # noqa: BLE001 - reported, not hidden
        outcome["error"] = f"{type(e).__name__}: {e}"
    outcome["seconds"] = round(time.monotonic() - start, 1)
    import hvd_herring
    outcome["counters"] = hvd_herring.counters()
    write_report(rank, outcome)
    sys.exit(1 if outcome["error"] or outcome["wrong"] else 0)


if __name__ == "__main__":
    main()
