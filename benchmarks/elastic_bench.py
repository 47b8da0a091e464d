"""Elastic workers (issue 11): how long horovodrun's elastic mode takes to act on a change.

- host added: from the moment the discovery output lists a new host to the first step trained at
  the new size (driver's discovery poll, notification, the next commit, spawning the new workers,
  the new round's rendezvous, the state broadcast);
- worker death: from a worker's SIGKILL to the survivors' first step at the smaller size
  (failure detection, restore, the driver's barrier and blacklisting, the new round).

Each is one real `horovodrun --min-np/--max-np --host-discovery-script` launch of the test
worker (tests/workers/elastic_torch_worker.py, scenarios add_remove and kill_no_replacement of
tests/workers/elastic_common.py) on this machine, with two host names for it; the times come
from the workers' own event logs. Stacks: herring (HOROVOD_BACKEND=herring) and, when the peer
environment exists (benchmarks/peers/setup_horovod_torch.sh -> .cache/horovod-torch), Horovod
0.28.1 with gloo, running the same script.

    .venv/bin/python -m benchmarks.elastic_bench [--repeats 3] [--out docs/elastic_bench.json]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKERS = os.path.join(ROOT, "tests", "workers")
sys.path.insert(0, WORKERS)
import elastic_common as common  # noqa: E402

PEER_BIN = os.path.join(os.environ.get("HERRING_BENCH_CACHE", os.path.join(ROOT, ".cache")),
                        "horovod-torch", "venv", "bin")
LAUNCH_TIMEOUT = 240

# measurement -> (scenario, -np, initial hosts, min np, max np)
MEASUREMENTS = {
    "host_added": ("add_remove", 2, [f"{common.HOST_A}:2"], 1, 4),
    "worker_death": ("kill_no_replacement", 4, [f"{common.HOST_A}:2", f"{common.HOST_B}:2"], 2, 4),
}


def stacks():
    out = {"herring": (os.path.dirname(sys.executable), {"HOROVOD_BACKEND": "herring"})}
    if os.path.exists(os.path.join(PEER_BIN, "horovodrun")):
        out["horovod-gloo"] = (PEER_BIN, {"HOROVOD_BACKEND": None})
    return out


def launch(bin_dir, stack_env, scenario, np_, hosts, min_np, max_np):
    """One elastic job; returns the workers' events (sorted by time)."""
    results = tempfile.mkdtemp(prefix=f"herring-elastic-bench-{scenario}-")
    hosts_file = os.path.join(results, "hosts")
    common.write_hosts(hosts_file, hosts)
    discover = os.path.join(results, "discover.sh")
    with open(discover, "w") as f:
        f.write(f"#!/bin/sh\ncat {hosts_file}\n")
    os.chmod(discover, 0o755)
    env = dict(os.environ, PYTHONPATH=WORKERS, PYTHONUNBUFFERED="1", HERRING_TEST_RESULTS=results,
               HERRING_TEST_SCENARIO=scenario, HERRING_TEST_HOSTS_FILE=hosts_file,
               PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""))
    for k, v in stack_env.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    cmd = [os.path.join(bin_dir, "horovodrun"), "-np", str(np_), "--min-np", str(min_np), "--max-np",
           str(max_np), "--host-discovery-script", discover, "--network-interface", "lo",
           os.path.join(bin_dir, "python"), os.path.join(WORKERS, "elastic_torch_worker.py")]
    proc = subprocess.run(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=LAUNCH_TIMEOUT)
    try:
        events = common.read_events(results)
    finally:
        subprocess.run(["rm", "-rf", results])
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}")
    return events


def first_step_at(events, size, after):
    return min(e["t"] for e in events if e["event"] == "step" and e["size"] == size and e["t"] > after)


def measure(name, events):
    if name == "host_added":
        start = next(e["t"] for e in events if e["event"] == "hosts" and len(e["hosts"]) == 2)
        return first_step_at(events, 4, start) - start
    start = next(e["t"] for e in events if e["event"] == "fail")
    return first_step_at(events, 2, start) - start


def run(repeats):
    out = {"date": time.strftime("%Y-%m-%d %H:%M"), "load_average": " ".join(f"{x:.1f}" for x in os.getloadavg()),
           "repeats": repeats, "stacks": {}}
    for stack, (bin_dir, stack_env) in stacks().items():
        out["stacks"][stack] = {}
        for name, (scenario, np_, hosts, min_np, max_np) in MEASUREMENTS.items():
            seconds = [measure(name, launch(bin_dir, stack_env, scenario, np_, hosts, min_np, max_np))
                       for _ in range(repeats)]
            out["stacks"][stack][name] = {"seconds": seconds, "median": statistics.median(seconds)}
            print(f"{stack} {name}: " + " ".join(f"{s:.2f}" for s in seconds), flush=True)
    return out


def section(results):
    """The results as markdown (docs/benchmarks.md, through benchmarks/report.py)."""
    st = results["stacks"]
    lines = [f"Generated by `python -m benchmarks.elastic_bench` on {results['date']} (load average at "
             f"start {results['load_average']}); medians of {results['repeats']} launches each.\n",
             "**Scenario.** One machine with two host names (`localhost`, `127.0.0.1`), real `horovodrun "
             "--min-np/--max-np --host-discovery-script --network-interface lo`, the torch test script of "
             "tests/test_elastic_workers.py (hvd.elastic.run, TorchState, a commit per step). *Host added*: "
             "2 workers; rank 0 adds a second host of 2 slots to the discovery output; time to the first "
             "step at size 4 (includes the driver's 1 s discovery poll and starting two Python processes "
             "that import torch). *Worker death*: 4 workers on two hosts; one is SIGKILLed mid-step; "
             "time to the survivors' first step at size 2 (its host is blacklisted).\n",
             "| Stack | host added -> first step at the new size | worker death -> survivors' first step |",
             "| --- | --- | --- |"]
    for stack, m in st.items():
        cells = [f"{m[k]['median']:.2f} s ({', '.join(f'{s:.2f}' for s in m[k]['seconds'])})"
                 for k in ("host_added", "worker_death")]
        lines.append(f"| {stack} | {cells[0]} | {cells[1]} |")
    if "horovod-gloo" not in st:
        lines.append("\nHorovod-gloo was not measured: the peer environment (.cache/horovod-torch, built by "
                     "benchmarks/peers/setup_horovod_torch.sh) did not exist on this machine when this ran.")
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default=os.path.join(ROOT, "docs", "elastic_bench.json"))
    args = p.parse_args()
    results = run(args.repeats)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    print(section(results))


if __name__ == "__main__":
    main()
