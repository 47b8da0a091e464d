"""Horovod's own Ray tests (v0.28.1's test/single/test_ray.py with its test/utils), run whole under
herring (HOROVOD_BACKEND=herring in the project's .venv) and under stock Horovod-gloo (the peer of
benchmarks/peers with Ray: setup_horovod_ray.sh), one after the other, in the same run.

    .venv/bin/python -m benchmarks.cluster_engines.horovod_ray_suite HOROVOD_GIT_DIR \\
        [--engines herring peer] [--out benchmarks/results/horovod_ray_suite.json]

One change to Horovod's file, the same for both engines: its `ray_start_4_cpus` fixture calls
`ray.init(num_cpus=4, _redis_max_memory=...)`, an argument Ray 2.60 rejects ("Unknown keyword
argument"), which errors every test using that fixture before it runs; the argument is dropped.
Not part of the test suite: each engine's run takes 5-10 minutes here."""

import argparse
import os
import sys

from benchmarks.cluster_engines.horovod_spark_suite import run_suite
from benchmarks.common.paths import ROOT

PEER_SETUP = os.path.join(ROOT, "benchmarks", "peers", "setup_horovod_ray.sh")
TEST_DIR = "test/single"
REDIS_ARGUMENT = b", _redis_max_memory=1024 * 1024 * 1024"


def without_redis_memory(path, text):
    if path.endswith("test_ray.py"):
        assert REDIS_ARGUMENT in text, "Horovod's test_ray.py changed: review the adaptation"
        return text.replace(REDIS_ARGUMENT, b"")
    return text


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("git_dir")
    p.add_argument("--engines", nargs="+", default=["herring", "peer"], choices=["herring", "peer"])
    p.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "horovod_ray_suite.json"))
    args = p.parse_args()
    run_suite(args.git_dir, ["test_ray.py"], args.engines, args.out, TEST_DIR, without_redis_memory, PEER_SETUP,
              adapted="ray_start_4_cpus without _redis_max_memory")


if __name__ == "__main__":
    sys.exit(main())
