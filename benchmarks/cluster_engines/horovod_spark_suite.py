"""Horovod's own Spark tests (v0.28.1's test/integration/test_spark.py with its test/utils), run
whole and unmodified, under herring (HOROVOD_BACKEND=herring in the project's .venv) and under
stock Horovod-gloo (the peer of benchmarks/peers with pyspark: setup_horovod_spark.sh), one after
the other, in the same run. Prints each engine's counts and every failing test.

    .venv/bin/python -m benchmarks.cluster_engines.horovod_spark_suite HOROVOD_GIT_DIR \\
        [--engines herring peer] [--tests test_spark.py] [--out benchmarks/results/horovod_spark_suite.json]
        [--keras 2|3]

--keras picks the Keras tf.keras is in the tests and the executors (TF_USE_LEGACY_KERAS=1 or 0;
default: the environment's). Horovod wrote its Keras tests for Keras 2; with --keras 3 the one
Keras 2 spelling in their own code, `SGD(lr=...)`, reads `SGD(learning_rate=...)`.

HOROVOD_GIT_DIR: a git directory of horovod/horovod holding the tag v0.28.1 (the `fetch` tool's
snapshot, or a clone). Not part of the test suite: each engine's run takes 5-10 minutes here."""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

from benchmarks.common.paths import ROOT

TAG = "v0.28.1"
FILES = ["test/utils/common.py", "test/utils/spark_common.py"]
PEER_SETUP = os.path.join(ROOT, "benchmarks", "peers", "setup_horovod_spark.sh")


def export(git_dir, tests, into, test_dir="test/integration", adapt=None):
    """Horovod's files at TAG into `into`; adapt(path, text) -> text changes a file (said where used)."""
    for path in FILES + [f"{test_dir}/{t}" for t in tests]:
        text = subprocess.run(["git", "--git-dir", git_dir, "show", f"{TAG}:{path}"], check=True,
                              capture_output=True).stdout
        if adapt:
            text = adapt(path, text)
        target = os.path.join(into, path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as f:
            f.write(text)


def engine_env(engine, peer_setup=PEER_SETUP):
    env = {k: v for k, v in os.environ.items() if k not in ("HOROVOD_BACKEND", "PYSPARK_PYTHON")}
    if engine == "herring":
        python = os.path.join(ROOT, ".venv", "bin", "python")
        env["HOROVOD_BACKEND"] = "herring"
    else:
        python = subprocess.run(["bash", peer_setup], check=True, capture_output=True, text=True).stdout.split()[-1]
    env["PYSPARK_PYTHON"] = python  # the executors' workers run the same environment as the tests
    return python, env


def run(engine, tree, tests, test_dir="test/integration", peer_setup=PEER_SETUP):
    python, env = engine_env(engine, peer_setup)
    junit = os.path.join(tree, f"{engine}.xml")
    t0 = time.time()
    # From test/integration, as Horovod's CI runs them: Spark's Python workers inherit the working
    # directory, and unpickle the tests' model classes from the test modules found there.
    proc = subprocess.run([python, "-m", "pytest", "-p", "no:cacheprovider", "-q", f"--junitxml={junit}"] + tests,
                          cwd=os.path.join(tree, test_dir), env=env, capture_output=True, text=True,
                          timeout=3600)
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    failures = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = case.get("name")
        bad = case.find("failure") if case.find("failure") is not None else case.find("error")
        if bad is not None:
            counts["failed"] += 1
            failures[name] = (bad.get("message") or "").splitlines()[0][:300] if bad.get("message") else ""
        elif case.find("skipped") is not None:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    return {"python": python, "seconds": round(time.time() - t0), "counts": counts, "failures": failures,
            "load_average_end": os.getloadavg(), "tail": proc.stdout[-2000:]}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("git_dir")
    p.add_argument("--engines", nargs="+", default=["herring", "peer"], choices=["herring", "peer"])
    p.add_argument("--tests", nargs="+", default=["test_spark.py"])
    p.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "horovod_spark_suite.json"))
    p.add_argument("--keras", choices=["2", "3"])
    args = p.parse_args()
    facts = {}
    if args.keras:
        os.environ["TF_USE_LEGACY_KERAS"] = "1" if args.keras == "2" else "0"
        facts["keras"] = args.keras
    adapt = _keras3_spelling if args.keras == "3" else None
    if adapt:
        facts["adapted"] = "tests' own SGD(lr=...) read SGD(learning_rate=...) (Keras 3 spelling)"
    run_suite(args.git_dir, args.tests, args.engines, args.out, adapt=adapt, **facts)


def _keras3_spelling(path, text):
    return text.replace(b"optimizers.SGD(lr=", b"optimizers.SGD(learning_rate=") if path.endswith("_keras.py") else text


def run_suite(git_dir, tests, engines, out, test_dir="test/integration", adapt=None, peer_setup=PEER_SETUP,
              **facts):
    """Exports Horovod's tests, runs them whole under each engine in turn, prints each engine's
    counts and failures, and writes the results (with `facts`) to `out`."""
    results = {"tag": TAG, "tests": tests, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               "load_average_start": os.getloadavg(), "engines": {}, **facts}
    with tempfile.TemporaryDirectory(prefix="horovod-suite-") as tree:
        export(git_dir, tests, tree, test_dir, adapt)
        for engine in engines:
            r = run(engine, tree, tests, test_dir, peer_setup)
            results["engines"][engine] = r
            print(f"{engine}: {r['counts']} in {r['seconds']} s", flush=True)
            for name, why in sorted(r["failures"].items()):
                print(f"  FAILED {name}: {why}", flush=True)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
