"""Running a cluster-engine driver (tests/cluster_engines/applications/workers/spark_driver.py,
ray_driver.py) as its own application under HOROVOD_BACKEND=herring, and checking that nothing it
started outlives it."""

import json
import os
import sys
import time
import uuid

from launch import ROOT, _run, herring_env

WORKERS = os.path.join(ROOT, "tests", "cluster_engines", "applications", "workers")


def run_driver(script, scenarios, tmp_path, timeout, **env):
    """Runs `python <WORKERS>/<script> OUT.json scenario...`; returns (results, Run, leftovers)."""
    tag = uuid.uuid4().hex
    out = tmp_path / f"{script}.json"
    run = _run([sys.executable, os.path.join(WORKERS, script), str(out)] + list(scenarios),
               herring_env(HERRING_ENGINE_TEST_TAG=tag, **env), timeout)
    assert run.returncode == 0 and out.exists(), f"{script} failed ({run.returncode}):\n{run.output[-6000:]}"
    with open(out) as f:
        results = json.load(f)
    return results, run, processes_tagged(tag)


def processes_tagged(tag, grace_seconds=30):
    """Processes still running with the job's tag in their environment (every process the driver
    started inherits it: JVMs, Python workers, raylets, actors), after a grace period in which
    they may finish exiting."""
    needle = f"HERRING_ENGINE_TEST_TAG={tag}".encode()
    deadline = time.monotonic() + grace_seconds
    while True:
        alive = []
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    if needle in f.read().split(b"\0"):
                        with open(f"/proc/{pid}/stat") as s:
                            if s.read().split(") ")[-1].startswith("Z"):
                                continue  # a zombie waiting for a parent that is not ours to reap
                        with open(f"/proc/{pid}/cmdline", "rb") as c:
                            alive.append((int(pid), c.read().replace(b"\0", b" ").decode()[:200]))
            except OSError:
                continue
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(1)


def assert_close(weights, reference, what):
    assert len(weights) == len(reference), f"{what}: {len(weights)} weights, reference has {len(reference)}"
    worst = max(abs(a - b) for a, b in zip(weights, reference))
    assert worst < 1e-5, f"{what}: differs from the single-process reference by up to {worst}"


def assert_ranks_trained(job, what, reference, in_rank_order=False):
    """A two-rank training job returned without error: the results of ranks 0 and 1 of 2 (sorted by
    rank first when in_rank_order, for runners that return them in any order), each with weights
    equal to `reference`. Returns the ranks' results."""
    assert "error" not in job, job
    ranks = sorted(job["result"], key=lambda r: r["rank"]) if in_rank_order else job["result"]
    assert [(r["rank"], r["size"]) for r in ranks] == [(0, 2), (1, 2)], ranks
    for r in ranks:
        assert_close(r["weights"], reference, f"{what} rank {r['rank']}")
    return ranks
