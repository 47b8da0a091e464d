"""Memory bandwidth of this machine with P processes streaming at once (P = every core: the
memory-traffic bound of a local allreduce needs the bandwidth of all cores together).

Two kernels, each over private buffers far larger than the caches:
    copy : glibc memcpy(dst, src, n)           -> moves 2n bytes (n read + n written)
    add  : numpy float32 a += b, n bytes of a  -> moves 3n bytes (2n read + n written)
Each trial: every process waits at a barrier, runs `reps` kernels, and reports its time; the
trial's rate is the bytes processed by all processes over the slowest one's time. Prints one JSON
object: per kernel and process count, the rate of every trial and their median.

    membw_worker.py --bytes 268435456 --procs 1 2 --trials 5 --reps 4"""

import argparse
import ctypes
import json
import multiprocessing as mp
import os
import statistics
import time

import numpy as np


def _run(kernel, nbytes, reps, trials, barrier, out):
    libc = ctypes.CDLL("libc.so.6")
    libc.memcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    n = nbytes // 4
    a = np.full(n, 1.0, dtype=np.float32)     # touched: no page faults inside the timed loop
    b = np.full(n, 2.0, dtype=np.float32)
    if kernel == "copy":
        step = lambda: libc.memcpy(a.ctypes.data, b.ctypes.data, a.nbytes)  # noqa: E731
    else:
        step = lambda: np.add(a, b, out=a)  # noqa: E731
    step()                                    # warm
    for _ in range(trials):
        barrier.wait()
        start = time.perf_counter()
        for _ in range(reps):
            step()
        out.put(time.perf_counter() - start)
        barrier.wait()                        # the next trial starts together


def measure(kernel, procs, nbytes, reps, trials):
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(procs), ctx.Queue()
    workers = [ctx.Process(target=_run, args=(kernel, nbytes, reps, trials, barrier, out)) for _ in range(procs)]
    for w in workers:
        w.start()
    rates = []
    try:
        for _ in range(trials):
            slowest = max(out.get(timeout=300) for _ in range(procs))
            rates.append(procs * reps * nbytes / slowest)
    finally:
        for w in workers:
            w.join(timeout=60)
            if w.is_alive():
                w.kill()
                w.join()
    bad = [w.exitcode for w in workers if w.exitcode != 0]
    if bad:
        raise RuntimeError(f"{kernel} with {procs} processes: workers exited with {bad}")
    return {"kernel": kernel, "procs": procs, "bytes": nbytes, "reps": reps,
            "rates": rates, "median": statistics.median(rates), "max": max(rates)}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bytes", type=int, default=256 << 20, help="bytes of each buffer (per process)")
    p.add_argument("--procs", type=int, nargs="+", default=[1, os.cpu_count() or 1])
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--reps", type=int, default=4)
    args = p.parse_args()
    results = [measure(k, n, args.bytes, args.reps, args.trials) for n in args.procs for k in ("copy", "add")]
    print(json.dumps({"kind": "membw", "cores": os.cpu_count(), "results": results}))


if __name__ == "__main__":
    main()
