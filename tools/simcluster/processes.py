"""Processes of the simulated cluster: starting them so they cannot outlive the harness,
running commands inside a host's namespaces, and finding what a killed harness left behind.

Every process the harness starts carries HVDSIM_OWNER=<pid>:<start time> of the harness process
in its environment and dies with it (PR_SET_PDEATHSIG); its temporary directory is named
hvdsim-<pid>-<start time>-*. A harness whose owner is gone left leftovers: `cleanup_leftovers`
kills those processes (by PID) and removes those directories. Nothing else is ever touched.
"""

import ctypes
import os
import shutil
import signal
import subprocess
import tempfile
import time

OWNER_ENV = "HVDSIM_OWNER"
WORKDIR_PREFIX = "hvdsim-"
_PR_SET_PDEATHSIG = 1


class ClusterError(RuntimeError):
    """The simulated cluster could not be built, used or torn down; the message says what."""


def start_time(pid):
    """The process's start time in clock ticks since boot (with the PID, a unique identity)."""
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    return int(stat[stat.rindex(")") + 2:].split()[19])


def owner_tag(pid=None):
    pid = pid or os.getpid()
    return f"{pid}:{start_time(pid)}"


def owner_alive(tag):
    try:
        pid, ticks = (int(x) for x in tag.split(":"))
        return start_time(pid) == ticks
    except (OSError, ValueError):
        return False


def die_with_parent():
    """preexec_fn: SIGKILL this child when the thread that started it exits (so a harness killed
    with SIGKILL takes its hosts with it; start the cluster from a thread that outlives it)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def spawn(argv, env=None, **kw):
    """Starts a process of the cluster: tagged with the owner, killed if the harness dies, in its
    own session (Ctrl-C on the terminal reaches the harness, which tears down in order)."""
    env = dict(os.environ if env is None else env)
    env[OWNER_ENV] = owner_tag()
    return subprocess.Popen(argv, env=env, preexec_fn=die_with_parent, start_new_session=True, **kw)


def run(argv, what, input=None, timeout=30):
    """Runs a set-up command to completion; a failure raises ClusterError naming `what`, the
    command and its output."""
    try:
        proc = spawn(argv, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    except OSError as e:
        raise ClusterError(f"{what}: cannot start {argv[0]}: {e}") from None
    try:
        out, _ = proc.communicate(input=input, timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        raise ClusterError(f"{what}: {' '.join(argv[:4])}... did not finish within {timeout} s") from None
    if proc.returncode != 0:
        shown = input if input is not None else " ".join(argv)
        raise ClusterError(f"{what} failed (exit status {proc.returncode}):\n{out.strip()}\n"
                           f"--- command ---\n{shown.strip()}")
    return out


def kill_group(proc, grace=0.0):
    """Kills a process we started and its process group, then reaps it. With a grace period, asks
    with SIGTERM first."""
    if proc.poll() is None and grace > 0:
        _signal_group(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
    if proc.poll() is None:
        _signal_group(proc.pid, signal.SIGKILL)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        raise ClusterError(f"process {proc.pid} ({proc.args[0] if proc.args else '?'}) survived SIGKILL "
                           "for 10 s") from None


def _signal_group(pid, sig):
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass
    except PermissionError:
        os.kill(pid, sig)


def children(pid):
    """PIDs whose parent is `pid`."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except FileNotFoundError:
        return []


def netns_inode(pid):
    return os.stat(f"/proc/{pid}/ns/net").st_ino


def nsenter(pid, argv, cwd=None, net=True, host=True):
    """argv run inside the namespaces of process `pid`: its network namespace, and with host=True
    also its UTS (host name), mount (/etc/hosts...) and PID namespaces."""
    cmd = ["nsenter", "--target", str(pid)]
    if net:
        cmd.append("--net")
    if host:
        cmd += ["--uts", "--mount", "--pid", f"--wd={cwd or os.getcwd()}"]
    return cmd + ["--"] + list(argv)


def _all_pids():
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def environ_of(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read()
    except OSError:
        return b""


def processes_holding_netns(inodes):
    """PIDs of processes living in any of the network namespaces with these inode numbers."""
    found = []
    for pid in _all_pids():
        try:
            if os.stat(f"/proc/{pid}/ns/net").st_ino in inodes:
                found.append(pid)
        except OSError:
            continue
    return found


def find_leftovers(include_live=False):
    """What harnesses whose owner is gone (or every harness, with include_live) left:
    (pids of tagged processes, temporary directories)."""
    me = os.getpid()
    pids = []
    for pid in _all_pids():
        if pid == me:
            continue
        for entry in environ_of(pid).split(b"\0"):
            if entry.startswith(OWNER_ENV.encode() + b"="):
                tag = entry.split(b"=", 1)[1].decode(errors="replace")
                if include_live or not owner_alive(tag):
                    pids.append(pid)
                break
    dirs = []
    tmp = tempfile.gettempdir()
    for name in os.listdir(tmp):
        if not name.startswith(WORKDIR_PREFIX):
            continue
        try:
            _, pid, ticks, _ = name.split("-", 3)
        except ValueError:
            continue
        if include_live or not owner_alive(f"{pid}:{ticks}"):
            dirs.append(os.path.join(tmp, name))
    return pids, dirs


def cleanup_leftovers(include_live=False):
    """Kills the processes and removes the directories `find_leftovers` reports; returns them."""
    pids, dirs = find_leftovers(include_live)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 10
    while pids and time.monotonic() < deadline and any(_is_running(p) for p in pids):
        time.sleep(0.05)
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)
    return pids, dirs


def _is_running(pid):
    """True while the process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        return stat[stat.rindex(")") + 2] != "Z"
    except OSError:
        return False


def make_workdir():
    return tempfile.mkdtemp(prefix=f"{WORKDIR_PREFIX}{os.getpid()}-{start_time(os.getpid())}-")
