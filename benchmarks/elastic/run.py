"""Elastic workers (issue 11): how long horovodrun's elastic mode takes to act on a change.

- host added: from the moment the discovery output lists a new host to the first step trained at
  the new size (driver's discovery poll, notification, the next commit, spawning the new workers,
  the new round's rendezvous, the state broadcast);
- worker death: from a worker's SIGKILL to the survivors' first step at the smaller size
  (failure detection, restore, the driver's barrier and blacklisting, the new round).

Each is one real `horovodrun --min-np/--max-np --host-discovery-script` launch of the test
worker (tests/elastic/workers/elastic_torch_worker.py, scenarios add_remove and kill_no_replacement of
tests/elastic/workers/elastic_common.py) on this machine, with two host names for it; the times come
from the workers' own event logs. Stacks: herring (HOROVOD_BACKEND=herring) and, when the peer
environment exists (benchmarks/peers/setup_horovod_torch.sh -> .cache/horovod-torch), Horovod
0.28.1 with gloo, running the same script.

    .venv/bin/python -m benchmarks.elastic.run [--repeats 3] [--out benchmarks/results/elastic.json]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks.common import peer_env
from benchmarks.common.paths import RESULTS_DIR, ROOT
from benchmarks.elastic.report import section

# The elastic test worker and its scenarios are the tests' own: the benchmark times the same script.
WORKERS = os.path.join(ROOT, "tests", "elastic", "workers")
sys.path.insert(0, WORKERS)
import elastic_common as common  # noqa: E402

LAUNCH_TIMEOUT = 240

# measurement -> (scenario, -np, initial hosts, min np, max np)
MEASUREMENTS = {
    "host_added": ("add_remove", 2, [f"{common.HOST_A}:2"], 1, 4),
    "worker_death": ("kill_no_replacement", 4, [f"{common.HOST_A}:2", f"{common.HOST_B}:2"], 2, 4),
}


def stacks():
    out = {"herring": (os.path.dirname(sys.executable), {"HOROVOD_BACKEND": "herring"})}
    if os.path.exists(os.path.join(peer_env.bin_dir(), "horovodrun")):
        out["horovod-gloo"] = (peer_env.bin_dir(), {"HOROVOD_BACKEND": None})
    return out


def launch(bin_dir, stack_env, scenario, np_, hosts, min_np, max_np):
    """One elastic job; returns the workers' events (sorted by time)."""
    results = tempfile.mkdtemp(prefix=f"herring-elastic-bench-{scenario}-")
    hosts_file, discover = common.write_discovery(results, hosts)
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


def main():
    p = argparse.ArgumentParser(prog="python -m benchmarks.elastic.run", description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default=os.path.join(RESULTS_DIR, "elastic.json"))
    args = p.parse_args()
    results = run(args.repeats)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    print(section(results))


if __name__ == "__main__":
    main()
