"""Horovod's own Spark tests (v0.28.1's test/integration/test_spark.py with its test/utils), run
whole and unmodified, under herring (HOROVOD_BACKEND=herring in the project's .venv) and under
stock Horovod-gloo (the peer of benchmarks/peers with pyspark: setup_horovod_spark.sh), one after
the other, in the same run. Prints each engine's counts and every failing test.

    .venv/bin/python -m benchmarks.cluster_engines.horovod_spark_suite HOROVOD_GIT_DIR \\
        [--engines herring peer] [--tests test_spark.py] [--out benchmarks/results/horovod_spark_suite.json]

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


def export(git_dir, tests, into):
    for path in FILES + [f"test/integration/{t}" for t in tests]:
        text = subprocess.run(["git", "--git-dir", git_dir, "show", f"{TAG}:{path}"], check=True,
                              capture_output=True).stdout
        target = os.path.join(into, path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as f:
            f.write(text)


def engine_env(engine):
    env = {k: v for k, v in os.environ.items() if k not in ("HOROVOD_BACKEND", "PYSPARK_PYTHON")}
    if engine == "herring":
        python = os.path.join(ROOT, ".venv", "bin", "python")
        env["HOROVOD_BACKEND"] = "herring"
    else:
        python = subprocess.run(["bash", PEER_SETUP], check=True, capture_output=True, text=True).stdout.split()[-1]
    env["PYSPARK_PYTHON"] = python  # the executors' workers run the same environment as the tests
    return python, env


def run(engine, tree, tests):
    python, env = engine_env(engine)
    junit = os.path.join(tree, f"{engine}.xml")
    t0 = time.time()
    # From test/integration, as Horovod's CI runs them: Spark's Python workers inherit the working
    # directory, and unpickle the tests' model classes from the test modules found there.
    proc = subprocess.run([python, "-m", "pytest", "-p", "no:cacheprovider", "-q", f"--junitxml={junit}"] + tests,
                          cwd=os.path.join(tree, "test", "integration"), env=env, capture_output=True, text=True,
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
    args = p.parse_args()
    results = {"tag": TAG, "tests": args.tests, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               "load_average_start": os.getloadavg(), "engines": {}}
    with tempfile.TemporaryDirectory(prefix="horovod-spark-suite-") as tree:
        export(args.git_dir, args.tests, tree)
        for engine in args.engines:
            r = run(engine, tree, args.tests)
            results["engines"][engine] = r
            print(f"{engine}: {r['counts']} in {r['seconds']} s", flush=True)
            for name, why in sorted(r["failures"].items()):
                print(f"  FAILED {name}: {why}", flush=True)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
