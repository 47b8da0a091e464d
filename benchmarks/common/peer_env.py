"""Where the peer environment lives: stock Horovod 0.28.1 built with PyTorch and gloo, made by
benchmarks/peers/setup_horovod_torch.sh (the single-host and elastic suites run it; the machine
description asks it for its versions)."""

import os

from benchmarks.common.paths import ROOT

SETUP_SCRIPT = os.path.join(ROOT, "benchmarks", "peers", "setup_horovod_torch.sh")


def cache_dir():
    return os.path.join(os.environ.get("HERRING_BENCH_CACHE", os.path.join(ROOT, ".cache")), "horovod-torch")


def bin_dir():
    return os.path.join(cache_dir(), "venv", "bin")


def python():
    return os.path.join(bin_dir(), "python")
