"""tools/simcluster/host_fanout.py, the per-host launcher of the scale benchmark: every process
of its plan runs with its own environment and log, and its exit is reported as it happens (a
status, a signal, or a command that cannot start), then ALL-EXITED."""

import json
import os
import subprocess
import sys

import launch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Exits with $CODE, or kills itself with signal -$CODE, after printing its id.
CHILD = ("import os, signal, sys; print('I am', os.environ['WHO']); code = int(os.environ['CODE'])\n"
         "os.kill(os.getpid(), -code) if code < 0 else sys.exit(code)")


def run_fanout(argv, processes):
    plan = {"argv": argv, "cwd": ROOT, "processes": processes}
    done = subprocess.run([sys.executable, "-m", "tools.simcluster.host_fanout"], cwd=ROOT, timeout=60,
                          input=json.dumps(plan) + "\n", capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_each_process_runs_with_its_environment_and_its_exit_is_reported():
    logs = launch.scratch_dir("herring-fanout-")
    processes = [{"id": i, "env": {"WHO": f"process {i}", "CODE": code}, "log": os.path.join(logs, f"{i}.log")}
                 for i, code in enumerate([0, 3, -9])]
    lines = run_fanout([sys.executable, "-c", CHILD], processes)
    assert sorted(l.split()[0] + " " + l.split()[1] for l in lines if l.startswith("STARTED")) == \
        ["STARTED 0", "STARTED 1", "STARTED 2"], lines
    exits = {int(l.split()[1]): int(l.split()[2]) for l in lines if l.startswith("EXIT")}
    assert exits == {0: 0, 1: 3, 2: -9}, lines
    assert lines[-1] == "ALL-EXITED", lines
    for i in range(3):
        with open(os.path.join(logs, f"{i}.log")) as f:
            assert f.read().strip() == f"I am process {i}"


def test_a_command_that_cannot_start_is_reported_as_127_with_the_reason_in_its_log():
    logs = launch.scratch_dir("herring-fanout-")
    log = os.path.join(logs, "0.log")
    lines = run_fanout(["/nonexistent/python"], [{"id": 7, "env": {}, "log": log}])
    assert lines == ["EXIT 7 127", "ALL-EXITED"], lines
    with open(log) as f:
        assert "cannot start /nonexistent/python" in f.read()
