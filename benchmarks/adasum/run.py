"""Adasum against Sum on the herring engine (issue 25): the time of one float32 allreduce of
4 KiB to 64 MiB with op=Sum (the herring PS allreduce and its small-message paths) and with
op=Adasum (vector-halving distance-doubling with the per-tensor dot products, native/ops/
adasum_allreduce.h), in the same job, at np=2 and np=4 on one host. Writes
benchmarks/results/adasum.json and docs/benchmarks_adasum.md.

    .venv/bin/python -m benchmarks.adasum.run [--nps 2 4]

Horovod-gloo has no Adasum on CPU without MPI (its Adasum is the MPI path), so there is no peer."""

import argparse
import json
import os
import subprocess
import sys
import tempfile

from benchmarks.adasum.report import section
from benchmarks.common import pages
from benchmarks.common.machine import facts, load_average
from benchmarks.common.paths import RESULTS_DIR, ROOT, WORKERS_DIR

WORKER = os.path.join(WORKERS_DIR, "adasum_vs_sum.py")


def run_np(np_):
    out = tempfile.mktemp(prefix="herring-adasum-bench-", suffix=".json")
    bin_dir = os.path.dirname(sys.executable)
    env = dict(os.environ, HOROVOD_BACKEND="herring", HERRING_BENCH_OUT=out, PYTHONUNBUFFERED="1",
               PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""))
    cmd = [os.path.join(bin_dir, "horovodrun"), "--gloo", "-np", str(np_), "-H", f"localhost:{np_}",
           sys.executable, WORKER]
    subprocess.run(cmd, env=env, cwd=ROOT, check=True, timeout=1800)
    with open(out) as f:
        result = json.load(f)
    os.remove(out)
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nps", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--out", default=os.path.join(RESULTS_DIR, "adasum.json"))
    args = parser.parse_args()
    machine = facts(with_peer=False)
    results = {"machine": pages.machine_line(machine, machine.get('load') or load_average()),
               "runs": [run_np(n) for n in args.nps]}
    pages.write_results_and_page(results, args.out, "Adasum against Sum (herring engine, one host)", section,
                                 "benchmarks_adasum.md")


if __name__ == "__main__":
    main()
