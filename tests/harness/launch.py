"""Launching real ranks for the tests: through horovodrun (gloo mode) or mpirun, exactly as a
user would, with HOROVOD_BACKEND=herring."""

import glob
import os
import subprocess
import sys
from dataclasses import dataclass

HARNESS = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HARNESS)
ROOT = os.path.dirname(TESTS)
BIN = os.path.dirname(sys.executable)
# Runs the script after it as if on a host of its own (HERRING_HOSTNAME per group of local ranks).
AS_SIMULATED_HOST = os.path.join("tests", "harness", "as_simulated_host.py")


def on_simulated_hosts(ranks_per_host, *script_args):
    """A launch's script arguments, run as if each `ranks_per_host` consecutive ranks were a host of
    their own (AS_SIMULATED_HOST); unchanged for 0 or None: one host."""
    return [AS_SIMULATED_HOST, str(ranks_per_host), *script_args] if ranks_per_host else list(script_args)


def import_path():
    """The folders a rank imports the tests' helpers from by module name (PYTHONPATH of every
    launch): the harness and every area's workers/."""
    return [HARNESS] + sorted(glob.glob(os.path.join(TESTS, "**", "workers"), recursive=True))


@dataclass
class Run:
    returncode: int
    output: str
    seconds: float
    shm_left: list = None  # what a private_shm launch left in its /dev/shm (names); None otherwise


# A job in a mount namespace of its own whose /dev/shm is a fresh tmpfs: what it leaves in shared
# memory is its alone, listed when it ends, so a test that checks for leaks needs no machine to
# itself (a job beside it neither adds names nor sees these). The launcher and its ranks all run
# inside, as the processes of one host do; `sh` passes the job's exit status on.
PRIVATE_SHM_SCRIPT = ('mount -t tmpfs -o mode=1777 herring-test-shm /dev/shm || exit 125; '
                      '"$@"; status=$?; ls -A /dev/shm > "$0"; exit $status')


def herring_env(**extra):
    env = dict(os.environ)
    env["HOROVOD_BACKEND"] = "herring"
    env["PATH"] = BIN + os.pathsep + env.get("PATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(import_path() + [env.get("PYTHONPATH", "")])
    for k, v in extra.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = str(v)
    return env


def _run(cmd, env, timeout, private_shm=False):
    import time
    if private_shm:
        listing = os.path.join(scratch_dir("herring-shm-left-"), "names")
        cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c", PRIVATE_SHM_SCRIPT, listing, *cmd]
    start = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        import signal
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(f"{' '.join(cmd)} did not finish within {timeout} s; output:\n{out}")
    run = Run(proc.returncode, out, time.monotonic() - start)
    if private_shm:
        assert os.path.exists(listing), f"the job's private /dev/shm was not listed (exit {run.returncode}):\n{out[-3000:]}"
        with open(listing) as f:
            run.shm_left = f.read().split()
    return run


def horovodrun(np, script_args, timeout=240, options=(), private_shm=False, **env):
    """horovodrun --gloo -np N -H localhost:N <options...> python <script_args...>; with
    private_shm, in a /dev/shm of its own (PRIVATE_SHM_SCRIPT: Run.shm_left)."""
    cmd = [os.path.join(BIN, "horovodrun"), "--gloo", "-np", str(np), "-H", f"localhost:{np}",
           *options, sys.executable] + list(script_args)
    return _run(cmd, herring_env(**env), timeout, private_shm)


def mpirun(np, script_args, timeout=240, **env):
    """mpirun -np N python <script_args...> (Open MPI; environment passed with -x)."""
    e = herring_env(**env)
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(np), "--bind-to", "none"]
    for k in ("HOROVOD_BACKEND", "PATH", "PYTHONPATH", "PYTHONUNBUFFERED") + tuple(env):
        if k in e:
            cmd += ["-x", k]
    cmd += [sys.executable] + list(script_args)
    return _run(cmd, e, timeout)


def python(script_args, timeout=120, **env):
    return _run([sys.executable] + list(script_args), herring_env(**env), timeout)


_scratch = []


def scratch_dir(prefix):
    """A temporary directory for a launch's results, removed when the test session ends."""
    import atexit
    import shutil
    import tempfile
    if not _scratch:
        atexit.register(lambda: [shutil.rmtree(d, ignore_errors=True) for d in _scratch])
    d = tempfile.mkdtemp(prefix=prefix)
    _scratch.append(d)
    return d


def run_with_results(launcher, np, script_args, prefix="herring-results-", **kwargs):
    """launcher(np, script_args, **kwargs) (horovodrun, mpirun, torchrun or one of their signature)
    with HERRING_TEST_RESULTS a fresh directory: (Run, {rank: what it wrote there}). The directory
    is removed."""
    import shutil
    results_dir = scratch_dir(prefix)
    run = launcher(np, script_args, HERRING_TEST_RESULTS=results_dir, **kwargs)
    per_rank = rank_results(results_dir, np)
    shutil.rmtree(results_dir, ignore_errors=True)
    return run, per_rank


def rank_results(results_dir, np):
    """{rank: what that rank wrote to <results_dir>/<rank>.json}, for the ranks that wrote one."""
    from tools.rank_results import read_rank_results  # the repository root is on the path of the tests
    return read_rank_results(results_dir, np)


def free_port():
    """A TCP port free right now on this machine (for torchrun's --master-port)."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(np, script_args, timeout=240, options=(), **env):
    """torchrun --nproc-per-node N --master-port <free> <options...> <script_args...> (one host;
    rank, size and the Store come from torch's env:// variables)."""
    cmd = [os.path.join(BIN, "torchrun"), "--nproc-per-node", str(np), "--master-port", str(free_port()), *options]
    cmd += list(script_args)
    return _run(cmd, herring_env(**env), timeout)
