"""Where the DeepSpeed peer lives: the `deepspeed` package (requirements/peer_deepspeed.txt) in the
project's .venv, and its shared-memory allreduce op (deepspeed_shm_comm) built once by
benchmarks/peers/setup_deepspeed.sh into a torch-extensions cache outside the tracked files
(default .cache/deepspeed; HERRING_BENCH_CACHE moves it). The stack, the machine description and
the DeepSpeed peer test read it from here."""

import os

from benchmarks.common.paths import ROOT

SETUP_SCRIPT = os.path.join(ROOT, "benchmarks", "peers", "setup_deepspeed.sh")
REQUIREMENTS = os.path.join(ROOT, "requirements", "peer_deepspeed.txt")


def _pinned_version():
    with open(REQUIREMENTS) as f:
        for line in f:
            if line.startswith("deepspeed=="):
                return line.strip().split("==", 1)[1]
    raise RuntimeError(f"{REQUIREMENTS} pins no deepspeed version")


VERSION = _pinned_version()


def cache_dir():
    return os.path.join(os.environ.get("HERRING_BENCH_CACHE", os.path.join(ROOT, ".cache")), "deepspeed")


def extensions_dir():
    """TORCH_EXTENSIONS_DIR of the built op: DeepSpeed's loader finds it there and does not rebuild."""
    return os.path.join(cache_dir(), "torch_extensions")


def stamp_path():
    return os.path.join(cache_dir(), "stamp")


def ready():
    """(True, "") when the peer set-up has run (its stamp names the pinned version), else (False, why)."""
    try:
        with open(stamp_path()) as f:
            stamp = f.read().strip()
    except FileNotFoundError:
        return False, (f"the DeepSpeed peer set-up has not been run (no {stamp_path()}); run: "
                       f"bash {os.path.relpath(SETUP_SCRIPT, ROOT)}")
    if f"deepspeed={VERSION}" not in stamp.split():
        return False, (f"the DeepSpeed peer was set up for another version ({stamp}); run: "
                       f"bash {os.path.relpath(SETUP_SCRIPT, ROOT)}")
    return True, ""
