"""The hot path before and after a change, in the same run: benchmarks/workers/hot_path.py (one
small synchronous dist.all_reduce and hvd.allreduce_ at a time) under torchrun, with each
checkout's .venv in turn, launches alternating so that the machine's drift hits both. Prints a
markdown table: the median per call per front and rank count (median over the launches).

    .venv/bin/python -m benchmarks.single_host.hot_path_before_after /path/to/before-checkout \\
        [--np 1 2] [--launches 3] [--bytes 4096]"""

import os
import re
import statistics

from benchmarks.common import before_after
from benchmarks.common.paths import ROOT

LINE = re.compile(r"^(\S+) np=(\d+) median ([\d.]+) us")
WORKER = os.path.join(ROOT, "benchmarks", "workers", "hot_path.py")


def launch(checkout, np_, size):
    env = {k: v for k, v in os.environ.items() if k != "HOROVOD_BACKEND"}
    out = before_after.torchrun(checkout, np_, WORKER, [str(size)], env=env, timeout=600)
    return {m.group(1): float(m.group(3)) for m in map(LINE.match, out.splitlines()) if m}


def main():
    p = before_after.parser(__doc__, launches=3)
    p.add_argument("--np", type=int, nargs="+", default=[1, 2])
    p.add_argument("--bytes", type=int, default=4096)
    args = p.parse_args()
    results, loads = before_after.measure(args, args.np, lambda checkout, np_: launch(checkout, np_, args.bytes))
    # (call, np, median before, median after) per front the worker timed.
    rows = [(front, np_, statistics.median(r[front] for r in runs["before"]),
             statistics.median(r[front] for r in runs["after"])) for np_, runs in results for front in runs["after"][0]]
    print(f"{args.bytes} bytes, {args.launches} launches per build, alternating; load average {loads[0]} -> {loads[-1]}\n")
    print("| call | np | before (us) | after (us) | after / before |\n| --- | --- | --- | --- | --- |")
    for front, np_, before, after in rows:
        print(f"| `{front}` | {np_} | {before:.2f} | {after:.2f} | {after / before:.2f} |")


if __name__ == "__main__":
    main()
