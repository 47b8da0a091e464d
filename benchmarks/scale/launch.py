"""Launching one scale job: N ranks across H simulated hosts, started DIRECTLY in each host with
the environment `horovodrun --gloo` would give them, and a rendezvous store we start ourselves
(benchmarks/scale/store.py: Horovod's RendezvousServer in host 0). Each host is entered once
(the cluster's `popen`, i.e. `nsenter` into its network, UTS, mount and PID namespaces) by a
launcher that starts that host's ranks (tools/simcluster/host_fanout.py), as mpirun's orted or
SLURM's step daemon does: the hosts start their ranks in parallel. (One nsenter per rank, from
the harness, one after another, was 8.1 of the 12.0 s from launch to init at 256 ranks.)

Why not horovodrun: it starts remote ranks over ssh, one session per rank, and sshd refuses
connections beyond MaxStartups (10 unauthenticated at once by default): 256 ranks on 16 hosts
would measure sshd's throttling, not the engine. Every launch has a deadline: a rank that has not
finished by then is killed with the rest of the job, and the launch is recorded as failed with
what each rank said."""

import glob
import json
import os
import re
import select
import signal
import subprocess
import sys
import time

from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts

from benchmarks.common.paths import ROOT
from tools.rank_results import read_rank_results
from tools.simcluster import processes as P

STORE_START_SECONDS = 60


class LaunchError(RuntimeError):
    pass


def job_base_env(cluster, extra):
    """The cluster's job environment without the caller's HOROVOD_*/HERRING_* settings (none may
    leak into a design's launch), plus `extra` (None removes)."""
    scrubbed = {k: None for k in os.environ if k.startswith(("HOROVOD_", "HERRING_")) and k != "HERRING_BENCH_CACHE"}
    return cluster.job_env({**scrubbed, "OMP_NUM_THREADS": "1", **extra})


def rank_env(slot, store_addr, store_port):
    """What `horovodrun --gloo ... --network-interfaces eth0` sets in each rank (facts.md)."""
    return {"HOROVOD_RANK": slot.rank, "HOROVOD_SIZE": slot.size, "HOROVOD_LOCAL_RANK": slot.local_rank,
            "HOROVOD_LOCAL_SIZE": slot.local_size, "HOROVOD_CROSS_RANK": slot.cross_rank,
            "HOROVOD_CROSS_SIZE": slot.cross_size, "HOROVOD_HOSTNAME": slot.hostname,
            "HOROVOD_GLOO_RENDEZVOUS_ADDR": store_addr, "HOROVOD_GLOO_RENDEZVOUS_PORT": store_port,
            "HOROVOD_CONTROLLER": "gloo", "HOROVOD_CPU_OPERATIONS": "gloo", "HOROVOD_GLOO_IFACE": "eth0"}


def _start_store(cluster, hosts_string, n, env):
    store = cluster.popen(0, [sys.executable, "-m", "benchmarks.scale.store", hosts_string, str(n)], env=env,
                          cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
    deadline = time.monotonic() + STORE_START_SECONDS
    seen = ""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([store.stdout], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        line = store.stdout.readline()
        if not line:
            break
        seen += line
        if line.startswith("PORT "):
            return store, int(line.split()[1])
    P.kill_group(store)
    raise LaunchError(f"the rendezvous store did not start within {STORE_START_SECONDS} s: {seen[-2000:]}")


def _stop_store(store):
    try:
        store.stdin.close()
        store.wait(timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        P.kill_group(store)


def probe_store(cluster, requests=300, timeout=120):
    """The store's per-request cost, measured from host 1 (store_probe.py) against a store in host 0."""
    base = job_base_env(cluster, {})
    store, port = _start_store(cluster, f"{cluster.host_names[0]}:1", 1, base)
    try:
        run = cluster.run(1 if len(cluster.host_names) > 1 else 0,
                          [sys.executable, "-m", "benchmarks.scale.store_probe", cluster.address(0), str(port),
                           str(requests)], env=base, cwd=ROOT, timeout=timeout)
        if run.returncode != 0:
            raise LaunchError(f"store probe failed ({run.returncode}): {run.output[-1500:]}")
        return json.loads(run.output.strip().splitlines()[-1])
    finally:
        _stop_store(store)


def _start_fanout(cluster, host, argv, processes, env, out_dir):
    """One launcher in `host` starting that host's ranks (tools/simcluster/host_fanout.py); what
    it says on stderr goes to <out_dir>/fanout-<host>.log."""
    with open(os.path.join(out_dir, f"fanout-{host}.log"), "w") as log:
        fanout = cluster.popen(host, [sys.executable, "-m", "tools.simcluster.host_fanout"], env=env, cwd=ROOT,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log)
    fanout.stdin.write((json.dumps({"argv": argv, "cwd": ROOT, "processes": processes}) + "\n").encode())
    fanout.stdin.close()
    fanout.ranks = [p["id"] for p in processes]
    return fanout


class _RankStates:
    """Every rank's state from its host launcher's reports: started (pid), exited (status)."""

    def __init__(self, fanouts, n):
        self._open = {f.stdout.fileno(): f for f in fanouts}
        self._partial = {fd: b"" for fd in self._open}
        self._n = n
        self._started = set()
        self._codes = {}
        self.spawned_at = None

    def read(self, timeout):
        if not self._open:
            return
        ready, _, _ = select.select(list(self._open), [], [], timeout)
        for fd in ready:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                # The launcher is gone: a rank it never reported died with it (PR_SET_PDEATHSIG).
                fanout = self._open.pop(fd)
                for r in fanout.ranks:
                    self._codes.setdefault(r, -signal.SIGKILL)
                continue
            *lines, self._partial[fd] = (self._partial[fd] + chunk).split(b"\n")
            for line in lines:
                self._take(line.decode().split())
        if self.spawned_at is None and len(self._started | set(self._codes)) == self._n:
            self.spawned_at = time.monotonic()

    def _take(self, words):
        if words and words[0] == "STARTED":
            self._started.add(int(words[1]))
        elif words and words[0] == "EXIT":
            self._codes[int(words[1])] = int(words[2])

    def all_exited(self):
        return len(self._codes) == self._n

    def failed(self):
        return [r for r, code in self._codes.items() if code != 0]

    def running(self):
        return [r for r in range(self._n) if r not in self._codes]

    def exit_codes(self):
        """rank -> exit status; None for a rank still running when the job was ended."""
        return {r: self._codes.get(r) for r in range(self._n)}


def run_job(cluster, n, hosts, argv, env_extra, out_dir, deadline_seconds, failure_grace=20):
    """Runs `argv` (the rank's command, "{out}" standing for out_dir; each rank writes
    <out_dir>/<rank>.json) as N ranks, N/hosts per
    host. Returns {"launched_at", "seconds", "spawn_seconds", "returncodes" (None: still running
    when the job was ended), "failed_ranks", "error", "records"}:
    records maps rank -> what that rank wrote; `error` says why the job failed (deadline, ranks'
    exit codes and the tail of their logs), None if every rank exited 0."""
    if n % hosts:
        raise LaunchError(f"{n} ranks do not divide evenly over {hosts} hosts")
    os.makedirs(out_dir, exist_ok=True)
    for old in glob.glob(os.path.join(out_dir, "*")):
        os.unlink(old)
    argv = [a.replace("{out}", out_dir) for a in argv]      # the rank's command names its results folder
    names = cluster.host_names
    hosts_string = ",".join(f"{names[h]}:{n // hosts}" for h in range(hosts))
    base = job_base_env(cluster, env_extra)
    store, port = _start_store(cluster, hosts_string, n, base)
    logs = {}
    fanouts = []
    every_rank_exited = False
    result = {"hosts_string": hosts_string, "store": f"{cluster.address(0)}:{port}"}
    try:
        per_host = {}
        for slot in get_host_assignments(parse_hosts(hosts_string), n):
            logs[slot.rank] = os.path.join(out_dir, f"{slot.rank}.log")
            per_host.setdefault(names.index(slot.hostname), []).append(
                {"id": slot.rank, "env": rank_env(slot, cluster.address(0), port), "log": logs[slot.rank]})
        result["launched_at"] = time.time()
        started = time.monotonic()
        for host, processes in per_host.items():
            fanouts.append(_start_fanout(cluster, host, argv, processes, base, out_dir))
        ranks = _RankStates(fanouts, n)
        deadline = started + deadline_seconds
        first_failure = None
        while not ranks.all_exited():
            now = time.monotonic()
            if ranks.failed() and first_failure is None:
                first_failure = now
            if now > deadline or (first_failure is not None and now > first_failure + failure_grace):
                break
            # Blocks on the launchers' reports for at most a second (no spinning).
            ranks.read(timeout=min(1.0, max(0.01, deadline - now)))
            if ranks.spawned_at is not None and "spawn_seconds" not in result:
                result["spawn_seconds"] = ranks.spawned_at - started
        result["seconds"] = time.monotonic() - started
        result.setdefault("spawn_seconds", result["seconds"])
        timed_out = ranks.running()
        every_rank_exited = not timed_out
    finally:
        # Ending a host's launcher group ends its ranks still running (host_fanout keeps them in it).
        for f in fanouts:
            try:
                f.wait(timeout=5 if every_rank_exited else 0)
            except subprocess.TimeoutExpired:
                P.kill_group(f)
            f.stdout.close()
        _stop_store(store)
    exit_codes = ranks.exit_codes()
    result["returncodes"] = exit_codes
    failed = sorted(r for r, code in exit_codes.items() if code != 0)
    result["records"] = read_rank_results(out_dir, n)
    result["error"] = None
    if failed:
        exited = [r for r in failed if r not in timed_out]
        why = (f"deadline of {deadline_seconds:g} s passed with {len(timed_out)} rank(s) still running"
               if timed_out and result["seconds"] >= deadline_seconds else
               f"{len(exited)} rank(s) exited non-zero" + (f", {len(timed_out)} still running {failure_grace} s later were ended"
                                                          if timed_out else ""))
        # The first cause first: a rank whose error is not the echo of another's failure
        # ("rank X has shut down") or that is still running (killed at the deadline or grace).
        said = {r: result["records"].get(r, {}).get("error") or _tail(logs[r]) for r in failed}
        when = {r: result["records"].get(r, {}).get("failed_at", float("inf")) for r in failed}
        echoes = sorted((r for r in failed if "has shut down" in said[r]), key=when.get)
        causes = sorted((r for r in failed if r not in echoes), key=lambda r: (r in timed_out, when[r]))
        # How many ranks said what (numbers masked), for the record.
        kinds = {}
        for r in failed:
            key = re.sub(r"\d+", "N", said[r] if r not in timed_out else "still running (killed)")[-200:]
            kinds[key] = kinds.get(key, 0) + 1
        result["error_kinds"] = kinds
        first = min(when, key=when.get) if when and min(when.values()) < float("inf") else None
        result["first_failure"] = None if first is None else {"rank": first, "error": said[first],
                                                              "after_launch_seconds": when[first] - result["launched_at"]}
        tails = [f"rank {r}: {said[r] if r not in timed_out else 'still running (killed): ' + said[r]}"
                 for r in (causes[:4] + echoes[:1])]
        result["error"] = (f"{why} (ranks {_ranges(failed)}; still running when the job was ended: "
                           f"{_ranges(sorted(timed_out)) or 'none'}); " + " | ".join(tails))
    result["failed_ranks"] = failed
    return result


def _tail(path, limit=600):
    try:
        with open(path, errors="replace") as f:
            text = f.read()
    except OSError:
        return "(no log)"
    lines = [l for l in text.strip().splitlines() if l.strip()]
    return " / ".join(lines[-4:])[-limit:] or "(empty log)"


def _ranges(ranks):
    out, start, prev = [], None, None
    for r in ranks + [None]:
        if start is None:
            start = prev = r
        elif r is not None and r == prev + 1:
            prev = r
        else:
            out.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = prev = r
    return ",".join(out)
