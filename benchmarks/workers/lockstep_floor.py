"""The least a lockstep cycle of N processes costs on this machine, with no engine at all: the
floor under any design's cycle when every rank is a Python process that must run once per cycle to
learn its result (the scale benchmark's tiny allreduce, benchmarks/scale).

Process 0 forks N - 1 others (after its imports, so that they cost nothing), then runs cycles: it
writes one byte into each other process's pipe; each reads it and answers with one byte on process
0's pipe; the cycle ends when process 0 has read N - 1 answers. That is one wake-up, one read and
one write per process per cycle, the least a rank can do, where a real rank also posts its bits
and input, waits, and copies its result. Prints one JSON object: the cycle's median and quartiles
over `iters` timed cycles after `warmup` untimed ones, and that cycle x cores / N (what one process
costs per cycle, when the N processes take turns on the cores).

    lockstep_floor.py N ITERS WARMUP DEADLINE_SECONDS"""

import json
import os
import signal
import sys
import time


def follower(down, up, cycles, deadline):
    signal.alarm(deadline)           # a follower never outlives the run, even if process 0 dies
    for _ in range(cycles):
        if not os.read(down, 1):
            break                    # process 0 closed the pipe: the run ended early
        os.write(up, b"x")
    os._exit(0)


def main():
    n, iters, warmup, deadline = (int(a) for a in sys.argv[1:5])
    signal.alarm(deadline)           # SIGALRM ends a run that missed its deadline (never a hang)
    up_read, up_write = os.pipe()
    downs, children = [], []
    for _ in range(n - 1):
        down_read, down_write = os.pipe()
        pid = os.fork()
        if pid == 0:
            follower(down_read, up_write, warmup + iters, deadline)
        os.close(down_read)
        downs.append(down_write)
        children.append(pid)
    times = []
    for k in range(warmup + iters):
        t0 = time.perf_counter()
        for w in downs:
            os.write(w, b"x")
        answered = 0
        while answered < n - 1:
            answered += len(os.read(up_read, n - 1 - answered))
        if k >= warmup:
            times.append(time.perf_counter() - t0)
    for w in downs:
        os.close(w)
    for pid in children:
        os.waitpid(pid, 0)
    times.sort()
    cores = len(os.sched_getaffinity(0))
    median = times[len(times) // 2]
    print(json.dumps({"n": n, "iters": iters, "cores": cores, "median_seconds": median,
                      "p25_seconds": times[len(times) // 4], "p75_seconds": times[(3 * len(times)) // 4],
                      "per_process_seconds": median * cores / n}))


if __name__ == "__main__":
    main()
