"""The native core's unit tests (native/tests/*.cc, GoogleTest), built by the set-up into
build/cmake. The runner runs once; every case is reported here as its own pytest test."""

import json
import os
import subprocess

import pytest

import launch

pytestmark = pytest.mark.fast  # the fast tier (tests/conftest.py)

BINARY = os.path.join(launch.ROOT, "build", "cmake", "herring_native_tests")


def _cases():
    """Suite.Case names, asked from the runner itself (empty when it was not built)."""
    if not os.path.exists(BINARY):
        return []
    listing = subprocess.run([BINARY, "--gtest_list_tests"], capture_output=True, text=True, timeout=60).stdout
    cases, suite = [], None
    for line in listing.splitlines():
        if not line.startswith(" "):
            suite = line.strip().rstrip(".")
        elif suite:
            cases.append(f"{suite}.{line.split('#')[0].strip()}")
    return cases


CASES = _cases()


@pytest.fixture(scope="module")
def report():
    path = os.path.join(launch.scratch_dir("herring-native-"), "report.json")
    run = subprocess.run([BINARY, f"--gtest_output=json:{path}"], capture_output=True, text=True, timeout=600)
    if not os.path.exists(path):
        pytest.fail(f"the native test runner wrote no report (exit {run.returncode}):\n{run.stdout[-6000:]}"
                    f"\n{run.stderr[-3000:]}")
    with open(path) as f:
        data = json.load(f)
    return {f"{s['name']}.{t['name']}": t for s in data["testsuites"] for t in s["testsuite"]}


def test_the_runner_was_built():
    assert CASES, f"{BINARY} is missing or lists no case: run scripts/setup.sh (it builds the native tests)"


@pytest.mark.parametrize("case", CASES)
def test_native(report, case):
    result = report.get(case)
    assert result is not None, f"{case} did not run"
    failures = [f["failure"] for f in result.get("failures", [])]
    assert not failures, "\n".join(failures)
