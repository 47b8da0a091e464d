"""The native core's unit tests (native/tests/*.cc), built by the set-up into build/cmake."""

import os
import subprocess

import launch

BINARY = os.path.join(launch.ROOT, "build", "cmake", "herring_native_tests")


def test_native_unit_tests_pass():
    assert os.path.exists(BINARY), "run scripts/setup.sh first (it builds the native tests)"
    run = subprocess.run([BINARY], capture_output=True, text=True, timeout=300)
    lines = run.stderr.strip().splitlines()
    summary = lines[-1] if lines else ""
    # The failing cases and their assertions, wherever they are in the (long) output.
    failures = "\n".join(l for l in lines if l.startswith("[ FAIL ]") or l.startswith("  FAILED "))
    assert run.returncode == 0, (failures or run.stderr[-6000:]) + "\n" + summary
    assert "0 failed" in summary, summary
