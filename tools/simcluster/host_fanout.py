"""Starts many processes inside one simulated host from one entry into it, as a cluster's per-host
launch daemon does (Open MPI's orted, SLURM's slurmstepd, torchrun's agent): the harness enters
each host once (nsenter) instead of once per process, and the hosts start their processes in
parallel.

    python -m tools.simcluster.host_fanout     # run inside the host; reads the plan from stdin

The plan is one JSON line: {"argv": [...], "cwd": "...", "processes": [{"id": 3, "env": {...},
"log": "/path/3.log"}, ...]}; each process runs argv with this launcher's environment plus its
`env`, its output in its `log`. What the launcher says on stdout, one line each:
`STARTED <id> <pid>`, `EXIT <id> <status>` (negative: killed by that signal; 127: could not start,
the reason in its log), and `ALL-EXITED` last.

The processes stay in the launcher's process group, so ending the launcher's group (processes.
kill_group) ends them with it; each also dies if the launcher does (PR_SET_PDEATHSIG)."""

import json
import os
import subprocess
import sys

from tools.simcluster.processes import die_with_parent


def say(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def start(plan):
    """pid -> (id, Popen) of every process that started; one that could not start is reported as
    exited. The Popen objects are kept: a dropped one would be reaped by subprocess's own clean-up
    at the next start, and its exit status lost to `reap`."""
    running = {}
    for spec in plan["processes"]:
        env = dict(os.environ)
        env.update({k: str(v) for k, v in spec.get("env", {}).items()})
        with open(spec["log"], "w") as log:
            try:
                proc = subprocess.Popen(plan["argv"], env=env, cwd=plan.get("cwd"), stdin=subprocess.DEVNULL,
                                        stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
            except OSError as e:
                log.write(f"host_fanout: cannot start {plan['argv'][0]}: {e}\n")
                say(f"EXIT {spec['id']} 127")
                continue
        running[proc.pid] = (spec["id"], proc)
        say(f"STARTED {spec['id']} {proc.pid}")
    return running


def reap(running):
    """Waits for every started process (blocking, no polling) and reports each exit."""
    while running:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        if pid in running:
            ident, proc = running.pop(pid)
            proc.returncode = os.waitstatus_to_exitcode(status)
            say(f"EXIT {ident} {proc.returncode}")


def main():
    plan = json.loads(sys.stdin.readline())
    reap(start(plan))
    say("ALL-EXITED")


if __name__ == "__main__":
    main()
