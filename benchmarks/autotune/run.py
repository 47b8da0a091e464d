"""Autotune against the defaults (issue 25): the same workload with the knobs' defaults and under
HOROVOD_AUTOTUNE=1 (from the defaults, and from a bad start, no fusion), launches interleaved in
one run, step time after the search settled. Workloads: 1000 one-element allreduces per step
(`tiny`) and ResNet-50's 161 gradients (`gradset`). Writes benchmarks/results/autotune.json and
docs/benchmarks_autotune.md.

    .venv/bin/python -m benchmarks.autotune.run [--nps 2] [--rounds 2]

The search runs with shortened sampling (HOROVOD_AUTOTUNE_WARMUP_SAMPLES=1, STEPS_PER_SAMPLE=3,
BAYES_OPT_MAX_SAMPLES=10) so that it settles within a few hundred steps; its own step times are
recorded too."""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from benchmarks.autotune.report import section
from benchmarks.common import pages
from benchmarks.common.machine import facts, load_average
from benchmarks.common.paths import RESULTS_DIR, ROOT, WORKERS_DIR

WORKER = os.path.join(WORKERS_DIR, "autotune_steps.py")
SEARCH = {"HOROVOD_AUTOTUNE": "1", "HOROVOD_AUTOTUNE_WARMUP_SAMPLES": "1",
          "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE": "3", "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES": "10"}
# name -> extra environment of the launch
CONFIGS = {"defaults": {}, "autotune": SEARCH, "autotune from no fusion": dict(SEARCH, HERRING_AUTOTUNE_START="0,1")}
AFTER_STEPS = {"tiny": 200, "gradset": 80}


def launch(np_, workload, extra):
    out = tempfile.mkdtemp(prefix="herring-autotune-bench-")
    bin_dir = os.path.dirname(sys.executable)
    # OMP_NUM_THREADS=1 like every stack of the other benchmarks (and torchrun's default): with two
    # OpenMP threads per rank on 2 cores, torch's fill of the 100 MB gradient set spin-waits in
    # libgomp against the other rank's threads, ~350 ms stalls in runs of steps (perf, 2026-11-26),
    # which made the earlier gradset figures the machine's, not the settings'.
    env = dict(os.environ, HOROVOD_BACKEND="herring", HERRING_TEST_RESULTS=out, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1",
               HERRING_AUTOTUNE_WORKLOAD=workload, HERRING_AUTOTUNE_AFTER_STEPS=str(AFTER_STEPS[workload]),
               PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""), **extra)
    cmd = [os.path.join(bin_dir, "horovodrun"), "--gloo", "-np", str(np_), "-H", f"localhost:{np_}",
           sys.executable, WORKER]
    try:
        subprocess.run(cmd, env=env, cwd=ROOT, check=True, timeout=1800, stdout=subprocess.DEVNULL)
        ranks = []
        for r in range(np_):
            with open(os.path.join(out, f"{r}.json")) as f:
                ranks.append(json.load(f))
    except (subprocess.SubprocessError, OSError) as e:
        return {"error": str(e)}
    # A step's time is its slowest rank's.
    after = [max(ts) for ts in zip(*(r["after_step_times"] for r in ranks))]
    search = [max(ts) for ts in zip(*(r["search_step_times"] for r in ranks))]
    fastest = min(after)
    return {"median_step_ms": statistics.median(after) * 1e3, "search_steps": ranks[0]["steps"],
            "stalled_steps": sum(t > 2 * fastest for t in after), "after_steps": len(after),
            "search_median_step_ms": statistics.median(search) * 1e3, "settings": ranks[0]["settings"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nps", type=int, nargs="+", default=[2])
    parser.add_argument("--workloads", nargs="+", default=["tiny", "gradset"])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default=os.path.join(RESULTS_DIR, "autotune.json"))
    args = parser.parse_args()
    machine = facts(with_peer=False)
    load_before = load_average()
    runs = []
    for np_ in args.nps:
        for workload in args.workloads:
            launches = {name: [] for name in CONFIGS}
            for _ in range(args.rounds):  # interleaved: drift in the machine's load hits every config
                for name, extra in CONFIGS.items():
                    launches[name].append(launch(np_, workload, extra))
                    print(np_, workload, name, launches[name][-1], flush=True)
            runs.append({"np": np_, "workload": workload, "launches": launches})
    results = {"machine": pages.machine_line(machine, f"{load_before} before, {load_average()} after"),
               "runs": runs}
    pages.write_results_and_page(results, args.out, "Autotune against the defaults (herring engine, one host)",
                                 section, "benchmarks_autotune.md")


if __name__ == "__main__":
    main()
