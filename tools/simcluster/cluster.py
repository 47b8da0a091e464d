"""A cluster of K hosts on one machine, with a real network stack between them, for running
Horovod jobs through the real multi-host launch path (horovodrun over ssh).

    with SimulatedCluster(hosts=4, rate="1gbit", slots=2) as c:
        run = c.horovodrun([sys.executable, "train.py"], env={"HOROVOD_BACKEND": "herring"})
        assert run.returncode == 0, run.output

Each host is a network namespace (eth0 with address <subnet>.<10+i>, joined by a veth pair to a
Linux bridge in a fabric namespace, shaped with tbf in both directions) plus its own UTS, mount
and PID namespaces: its own host name, /etc/hosts naming every host, and an sshd (PID 1 of the
host) with its own host key and an authorized-keys file in the cluster's temporary directory.
The job's horovodrun runs in host 0 and reaches the others with ssh exactly as on a real cluster.

Every namespace is held only by the processes in it: killing a host's PID 1 ends everything in
that host and frees its namespaces and links. The cluster's processes die with the harness
(PR_SET_PDEATHSIG), and teardown runs on exit, on exceptions and on Ctrl-C. Nothing is written
outside the temporary directory.

CLI:  python -m tools.simcluster.cluster --hosts 4 --rate 1gbit -- horovodrun ... (see --help)
"""

import argparse
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import List

from tools.simcluster import processes as P
from tools.simcluster.cluster_spec import ClusterSpec, SpecError
from tools.simcluster.fabric import FabricPlan
from tools.simcluster.host_identity import SSHD, ClusterIdentity, check_ssh_client_config_exists
from tools.simcluster.processes import ClusterError

BIN = os.path.dirname(sys.executable)
TOOLS = ("ip", "tc", "unshare", "nsenter", "ssh", "ssh-keygen", "mount")
HOST_NAMESPACES = ["unshare", "--net", "--uts", "--mount", "--propagation", "private", "--pid",
                   "--fork", "--kill-child", "--mount-proc"]


@dataclass
class Run:
    returncode: int
    output: str
    seconds: float
    argv: List[str]


def check_environment():
    """Raises ClusterError saying exactly what this machine lacks to simulate a cluster."""
    if os.geteuid() != 0:
        raise ClusterError(f"the simulated cluster needs root (network, mount and PID namespaces; "
                           f"euid is {os.geteuid()})")
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if not os.access(SSHD, os.X_OK):
        missing.append(f"{SSHD} (Debian package openssh-server)")
    if missing:
        raise ClusterError(f"missing tools: {', '.join(missing)}")
    check_ssh_client_config_exists()
    probe = ("set -e; ip link add name br type bridge; ip link add name v0 type veth peer name v1; "
             "ip link set v0 master br; ip link set v0 up; "
             "tc qdisc add dev v0 root tbf rate 1gbit burst 128k latency 20ms; "
             "mount -t tmpfs probe /mnt; hostname probe")
    try:
        P.run(HOST_NAMESPACES + ["sh", "-c", probe], "probing namespaces, bridge, veth and tbf")
    except ClusterError as e:
        raise ClusterError(f"this machine cannot build the simulated cluster: {e}") from None


class SimulatedCluster:
    """Context manager: builds the cluster on enter, tears it down (always) on exit.

    hosts/slots/rate: a uniform cluster of `hosts` workers with `slots` ranks each and links of
    `rate` (tc units: '1gbit', '500mbit'; None: unshaped); servers: extra server-only hosts.
    spec: a ClusterSpec (or a path to its JSON file) instead, for groups and per-host rates."""

    def __init__(self, hosts=2, rate="1gbit", slots=1, servers=0, spec=None, start_timeout=60, verbose=False):
        if spec is None:
            spec = ClusterSpec.uniform(hosts, slots=slots, rate=rate, servers=servers)
        elif isinstance(spec, (str, os.PathLike)):
            spec = ClusterSpec.load(spec)
        self.spec = spec.validated()
        self.plan = FabricPlan(self.spec)
        self.start_timeout = start_timeout
        self.verbose = verbose
        self.workdir = None
        self.identity = None
        self.setup_seconds = None
        self.teardown_seconds = None
        self._fabric = None           # Popen holding the fabric namespace
        self._host_procs = []         # Popen of each host's `unshare` (parent of its PID 1)
        self._host_pids = []          # each host's PID 1, as seen from here
        self._netns_inodes = set()
        self._commands = []           # Popen of commands started inside hosts

    # -- life cycle ---------------------------------------------------------------------------
    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def start(self):
        started = time.monotonic()
        check_environment()
        P.cleanup_leftovers()
        self.workdir = P.make_workdir()
        self.identity = ClusterIdentity(self.workdir, self.spec)
        self.identity.create()
        self._fabric = P.spawn(["unshare", "--net", "sleep", "infinity"], stdin=subprocess.DEVNULL)
        for i in range(len(self.spec.hosts)):
            with open(self.identity.init_log(i), "w") as log:
                self._host_procs.append(P.spawn(HOST_NAMESPACES + ["sh", "-c", self.identity.init_script(i)],
                                                stdin=subprocess.DEVNULL, stdout=log, stderr=log))
        for i in range(len(self.spec.hosts)):
            self._host_pids.append(self._wait_for_host_init(i))
        self._netns_inodes = {P.netns_inode(p) for p in [self._fabric.pid] + self._host_pids}
        try:
            P.run(P.nsenter(self._fabric.pid, ["sh", "-c", self.plan.fabric_script(self._host_pids)], host=False),
                  "building the fabric (bridges, links, shaping)")
            for i, pid in enumerate(self._host_pids):
                P.run(P.nsenter(pid, ["sh", "-c", self.plan.host_script(i)], host=False),
                      f"configuring the network of {self.spec.hosts[i].name}")
        except ClusterError:
            for i, proc in enumerate(self._host_procs):        # the real cause: a host is gone
                if proc.poll() is not None:
                    self._host_failed(i, f"its sshd exited with status {proc.returncode}")
            raise
        for i in range(len(self.spec.hosts)):
            self._wait_for_sshd(i)
        self._check_ssh_from_host0()
        self.setup_seconds = time.monotonic() - started
        if self.verbose:
            print(f"[cluster] up in {self.setup_seconds:.2f} s: {self.plan.describe()}; "
                  f"hosts {', '.join(h.name for h in self.spec.hosts)}; workdir {self.workdir}",
                  file=sys.stderr)

    def stop(self):
        """Ends every process of the cluster (by PID), which frees its namespaces and links, then
        removes the temporary directory. Safe to call twice; raises if something survived."""
        started = time.monotonic()
        problems = []
        for proc in self._commands:
            try:
                P.kill_group(proc)
            except ClusterError as e:
                problems.append(str(e))
        self._commands = []
        for proc in self._host_procs:
            for pid in P.children(proc.pid):     # PID 1 of the host: the kernel ends all of the host
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for proc in self._host_procs:
            # `unshare` reaps the host's PID 1 and then exits by itself; killing it first would
            # leave that PID 1 a zombie of a parent that never reaps it.
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        for proc in self._host_procs + ([self._fabric] if self._fabric else []):
            try:
                P.kill_group(proc)
            except ClusterError as e:
                problems.append(str(e))
        self._host_procs, self._host_pids, self._fabric = [], [], None
        if self._netns_inodes:
            deadline = time.monotonic() + 10
            while True:
                holders = P.processes_holding_netns(self._netns_inodes)
                if not holders or time.monotonic() > deadline:
                    break
                for pid in holders:             # e.g. something entered a host with ip netns exec
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                time.sleep(0.05)
            if holders:
                problems.append(f"processes {holders} still hold the cluster's network namespaces")
            self._netns_inodes = set()
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
            if os.path.exists(self.workdir):
                problems.append(f"could not remove {self.workdir}")
            self.workdir = None
        self.teardown_seconds = time.monotonic() - started
        if problems:
            raise ClusterError("teardown of the simulated cluster: " + "; ".join(problems))

    # -- using the cluster --------------------------------------------------------------------
    @property
    def host_names(self):
        return [h.name for h in self.spec.hosts]

    def address(self, host):
        return self.spec.address(self._index(host))

    @property
    def worker_hosts(self):
        return [self.spec.hosts[i].name for i in self.spec.workers()]

    @property
    def server_hosts(self):
        """Hosts with role "server": up, reachable, left out of horovodrun's -H (dedicated server
        shards will run there)."""
        return [self.spec.hosts[i].name for i in self.spec.servers()]

    @property
    def netns_inodes(self):
        """Inode numbers of the cluster's network namespaces (fabric and hosts) while it is up."""
        return set(self._netns_inodes)

    def listening(self, host, port):
        """True when a TCP socket of `host` listens on `port` (any address)."""
        try:
            with open(f"/proc/{self._host_pids[self._index(host)]}/net/tcp") as f:
                rows = [line.split() for line in f.readlines()[1:]]
        except OSError:
            return False
        # columns: slot, local address:port (hex), remote address:port, state (0A = LISTEN)
        return any(r[1].endswith(f":{port:04X}") and r[3] == "0A" for r in rows)

    def interface_bytes(self, host, dev="eth0"):
        """(received, sent) bytes so far on `dev` of `host`: what crossed its link."""
        with open(f"/proc/{self._host_pids[self._index(host)]}/net/dev") as f:
            for line in f:
                name, _, data = line.partition(":")
                if name.strip() == dev:
                    fields = data.split()
                    return int(fields[0]), int(fields[8])
        raise ClusterError(f"{self._name(host)} has no interface {dev}")

    def host_argv(self, host, argv, cwd=None):
        """argv wrapped to run inside `host` (index or name), as a process of that host."""
        return P.nsenter(self._host_pids[self._index(host)], argv, cwd=cwd)

    def popen(self, host, argv, env=None, cwd=None, **kw):
        """Starts argv inside `host`; the process is ended at teardown if still running."""
        proc = P.spawn(self.host_argv(host, argv, cwd), env=env, **kw)
        self._commands.append(proc)
        return proc

    def run(self, host, argv, env=None, cwd=None, timeout=600):
        """Runs argv inside `host` to completion (output captured); on timeout the command is
        killed and ClusterError says so with its output."""
        started = time.monotonic()
        proc = self.popen(host, argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            P.kill_group(proc)
            out, _ = proc.communicate()
            raise ClusterError(f"{' '.join(argv)} on {self._name(host)} did not finish within "
                               f"{timeout} s; output:\n{out[-6000:]}") from None
        finally:
            if proc in self._commands and proc.poll() is not None:
                self._commands.remove(proc)
        return Run(proc.returncode, out, time.monotonic() - started, list(argv))

    def horovodrun_argv(self, command, np=None, slots_per_host=None, extra_args=(), with_servers=False,
                        discovery_script=None):
        spec = self.spec
        slots = slots_per_host or None
        hosts = spec.host_list(slots)
        total = sum(slots or spec.hosts[i].slots for i in spec.workers())
        if with_servers and spec.servers():
            # Server hosts last, one slot each: with HERRING_DEDICATED_SERVERS=len(servers) the
            # last launched processes are the dedicated server shards, one per server host.
            hosts += "," + ",".join(f"{spec.hosts[i].name}:1" for i in spec.servers())
            total += len(spec.servers())
        # Elastic: the hosts come from the discovery script (run by the driver on host 0).
        placement = ["--host-discovery-script", discovery_script] if discovery_script else ["-H", hosts]
        return [os.path.join(BIN, "horovodrun"), "--gloo", "-np", str(np or total),
                *placement, "-i", self.identity.user_key,
                "--network-interfaces", "eth0"] + list(extra_args) + list(command)

    def job_env(self, env=None):
        """The launcher's environment: ours, the virtual environment's bin first on PATH, and
        `env` on top (None values remove a variable). horovodrun forwards all of it to every
        rank, over ssh too."""
        out = dict(os.environ)
        for k in ("SSH_CONNECTION", "SSH_CLIENT", "SSH_TTY", "SSH_AUTH_SOCK"):
            out.pop(k, None)        # the launcher of a simulated host is not inside our own ssh session
        out["PATH"] = BIN + os.pathsep + out.get("PATH", "")
        out["PYTHONUNBUFFERED"] = "1"
        for k, v in (env or {}).items():
            if v is None:
                out.pop(k, None)
            else:
                out[k] = str(v)
        return out

    def horovodrun(self, command, np=None, slots_per_host=None, env=None, cwd=None, timeout=600,
                   extra_args=(), with_servers=False, discovery_script=None):
        """Runs `horovodrun --gloo -np N -H simhost0:s,simhost1:s,... -i <userkey>
        --network-interfaces eth0 <command>` inside host 0; remote ranks start over ssh.
        with_servers=True appends every server host with one slot to -H (and to N), for
        HERRING_DEDICATED_SERVERS=len(c.server_hosts). discovery_script: an elastic job, its hosts
        printed by that script instead of -H (add --min-np/--max-np to extra_args)."""
        argv = self.horovodrun_argv(command, np, slots_per_host, extra_args, with_servers, discovery_script)
        return self.run(0, argv, env=self.job_env(env), cwd=cwd, timeout=timeout)

    # -- internals ----------------------------------------------------------------------------
    def _index(self, host):
        if isinstance(host, int):
            if not 0 <= host < len(self.spec.hosts):
                raise ClusterError(f"host {host}: the cluster has hosts 0..{len(self.spec.hosts) - 1}")
            return host
        try:
            return self.host_names.index(host)
        except ValueError:
            raise ClusterError(f"no host named {host!r} (hosts: {', '.join(self.host_names)})") from None

    def _name(self, host):
        return self.spec.hosts[self._index(host)].name

    def _host_failed(self, i, why):
        raise ClusterError(f"host {self.spec.hosts[i].name}: {why}\n"
                           f"init output: {self.identity.read_log(self.identity.init_log(i))}\n"
                           f"sshd log: {self.identity.read_log(self.identity.sshd_log(i))}")

    def _wait_for_host_init(self, i):
        deadline = time.monotonic() + self.start_timeout
        proc = self._host_procs[i]
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                self._host_failed(i, f"its init exited with status {proc.returncode}")
            kids = P.children(proc.pid)
            if kids:
                return kids[0]
            time.sleep(0.01)
        self._host_failed(i, f"its PID 1 did not appear within {self.start_timeout} s")

    def _wait_for_sshd(self, i):
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self._host_procs[i].poll() is not None:
                self._host_failed(i, f"sshd exited with status {self._host_procs[i].returncode}")
            if self.listening(i, 22):
                return
            time.sleep(0.01)
        self._host_failed(i, f"sshd did not listen on port 22 within {self.start_timeout} s")

    def _check_ssh_from_host0(self):
        """ssh from host 0 to every other host, all at once, as horovodrun will. Only stdout is
        judged: the remote login shell may write to stderr (pyenv's rehash racing between the
        concurrent sessions did), which horovodrun's own ssh sessions tolerate as well."""
        probes = {}
        for i in range(1, len(self.spec.hosts)):
            name = self.spec.hosts[i].name
            probes[name] = self.popen(0, ["ssh", name, "hostname"], stdin=subprocess.DEVNULL,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        failures = []
        for name, proc in probes.items():
            try:
                out, err = proc.communicate(timeout=self.start_timeout)
            except subprocess.TimeoutExpired:
                P.kill_group(proc)
                out, err = f"no answer within {self.start_timeout} s", ""
            self._commands.remove(proc)
            if proc.returncode != 0 or out.strip() != name:
                failures.append(f"ssh {self.spec.hosts[0].name} -> {name}: exit {proc.returncode}, "
                                f"answered {out.strip()!r}, stderr {err.strip()!r}")
        if failures:
            i = self.host_names.index(failures[0].split(" -> ")[1].split(":")[0])
            raise ClusterError("; ".join(failures) + f"\nsshd log of {self.host_names[i]}:\n"
                               f"{self.identity.read_log(self.identity.sshd_log(i))}")


# -- command line -----------------------------------------------------------------------------
def _parse_args(argv):
    p = argparse.ArgumentParser(
        prog="python -m tools.simcluster.cluster",
        description="Run a command inside host 0 of a fresh simulated cluster (network namespaces, "
                    "shaped links, an sshd per host), then tear it down. Hosts are named simhost0, "
                    "simhost1, ...; the environment has HVDSIM_HOSTS (horovodrun's -H value), "
                    "HVDSIM_NP and HVDSIM_SSH_KEY (for horovodrun -i).",
        epilog="example: python -m tools.simcluster.cluster --hosts 2 --slots 2 -- "
               "sh -c 'horovodrun --gloo -np $HVDSIM_NP -H $HVDSIM_HOSTS -i $HVDSIM_SSH_KEY "
               "--network-interfaces eth0 python train.py'")
    p.add_argument("--hosts", type=int, default=2, help="worker hosts (default 2)")
    p.add_argument("--slots", type=int, default=1, help="ranks per worker host (default 1)")
    p.add_argument("--servers", type=int, default=0, help="extra server-only hosts (default 0)")
    p.add_argument("--rate", default="1gbit", help="every host's link rate, tc units (default 1gbit; "
                                                   "'none' for unshaped)")
    p.add_argument("--spec", help="a JSON cluster description instead of --hosts/--slots/--rate")
    p.add_argument("--horovodrun", action="store_true",
                   help="wrap the command in horovodrun over every worker host's slots")
    p.add_argument("--measure-link", action="store_true",
                   help="measure the link between simhost1 and simhost0 with iperf3 and print it")
    p.add_argument("--cleanup", action="store_true",
                   help="remove what killed runs left (processes, temporary directories) and exit")
    p.add_argument("--timeout", type=float, default=3600, help="seconds the command may take")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- command and its arguments")
    args = p.parse_args(argv)
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if not args.cleanup and not args.command and not args.measure_link:
        p.error("give a command after --, or --measure-link, or --cleanup")
    return args


def _raise_on_sigterm(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv=None):
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    if args.cleanup:
        pids, dirs = P.cleanup_leftovers()
        print(f"killed {len(pids)} leftover process(es){': ' + ' '.join(map(str, pids)) if pids else ''}; "
              f"removed {len(dirs)} directory(ies){': ' + ' '.join(dirs) if dirs else ''}")
        return 0
    signal.signal(signal.SIGTERM, _raise_on_sigterm)
    try:
        spec = ClusterSpec.load(args.spec) if args.spec else \
            ClusterSpec.uniform(args.hosts, slots=args.slots, rate=args.rate, servers=args.servers)
    except SpecError as e:
        print(f"cluster description: {e}", file=sys.stderr)
        return 2
    status = 0
    try:
        with SimulatedCluster(spec=spec, verbose=True) as c:
            if args.measure_link:
                from tools.simcluster.link_bound import measure_link
                m = measure_link(c, 1 if len(spec.hosts) > 1 else 0, 0)
                print(m.describe())
            if args.command:
                env = c.job_env({"HVDSIM_HOSTS": spec.host_list(),
                                 "HVDSIM_NP": sum(spec.hosts[i].slots for i in spec.workers()),
                                 "HVDSIM_SSH_KEY": c.identity.user_key})
                argv = c.horovodrun_argv(args.command) if args.horovodrun else args.command
                proc = c.popen(0, argv, env=env, stdin=subprocess.DEVNULL)
                try:
                    status = proc.wait(timeout=args.timeout)
                except subprocess.TimeoutExpired:
                    print(f"[cluster] {shlex.join(argv)} did not finish within {args.timeout} s", file=sys.stderr)
                    status = 124
        print(f"[cluster] torn down in {c.teardown_seconds:.2f} s", file=sys.stderr)
    except ClusterError as e:
        print(f"[cluster] {e}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print("[cluster] interrupted; torn down", file=sys.stderr)
        return 130
    return status


if __name__ == "__main__":
    sys.exit(main())
