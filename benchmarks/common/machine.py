"""Facts about the machine and the software a benchmark run used, for the report's header."""

import datetime
import os
import platform
import re
import subprocess
from importlib import metadata

from benchmarks.common import peer_env
from benchmarks.common.paths import ROOT


def _read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _run(argv, cwd=None):
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=cwd).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _version(dist):
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def cpu_model():
    m = re.search(r"^model name\s*:\s*(.+)$", _read("/proc/cpuinfo"), re.M)
    return m.group(1).strip() if m else platform.processor() or "unknown"


def memory_bytes():
    m = re.search(r"^MemTotal:\s*(\d+) kB", _read("/proc/meminfo"), re.M)
    return int(m.group(1)) * 1024 if m else 0


def load_average():
    try:
        return list(os.getloadavg())
    except OSError:
        return []


def peer_versions():
    """Versions inside the Horovod-with-PyTorch environment, if it exists."""
    if not os.access(peer_env.python(), os.X_OK):
        return {}
    out = _run([peer_env.python(), "-c", "import json, horovod, torch; "
                "print(json.dumps({'horovod': horovod.__version__, 'torch': torch.__version__}))"])
    try:
        import json
        return json.loads(out.splitlines()[-1])
    except (ValueError, IndexError):
        return {}


def facts(with_peer=True):
    """The machine and versions; with_peer also asks the Horovod-with-PyTorch environment for its
    versions (a few seconds: it imports torch)."""
    os_release = re.search(r'^PRETTY_NAME="?([^"\n]+)', _read("/etc/os-release"), re.M)
    ompi = re.search(r"\(Open MPI\) (\S+)", _run(["mpirun", "--version"]))
    commit = _run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT)
    dirty = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT)
    peer = peer_versions() if with_peer else {}
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": round(memory_bytes() / (1 << 30), 1),
        "kernel": platform.release(),
        "os": os_release.group(1) if os_release else platform.platform(),
        "python": platform.python_version(),
        "compiler": (_run(["g++", "--version"]).splitlines() or ["unknown"])[0],
        "versions": {
            "hvd_herring": _version("hvd-herring")
            + (f" (commit {commit}{', modified' if dirty else ''})" if commit else ""),
            "torch": _version("torch"),
            "numpy": _version("numpy"),
            "horovod (frameworkless, herring's launcher)": _version("horovod"),
            "horovod (peer, built with PyTorch)": peer.get("horovod", "not used" if not with_peer else "not built"),
            "torch (peer environment)": peer.get("torch", "not used" if not with_peer else "not built"),
            "openmpi": ompi.group(1) if ompi else "not installed",
            "mpi4py": _version("mpi4py"),
            "deepspeed (peer)": _version("deepspeed"),
        },
    }
