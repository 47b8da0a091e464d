"""The native core's unit tests (native/tests/*.cc), built by the set-up into build/cmake."""

import os
import subprocess

import launch

BINARY = os.path.join(launch.ROOT, "build", "cmake", "herring_native_tests")


def test_native_unit_tests_pass():
    assert os.path.exists(BINARY), "run scripts/setup.sh first (it builds the native tests)"
    run = subprocess.run([BINARY], capture_output=True, text=True, timeout=300)
    summary = run.stderr.strip().splitlines()[-1] if run.stderr.strip() else ""
    assert run.returncode == 0, run.stderr[-6000:]
    assert "0 failed" in summary, summary
