"""The core-to-core round trip of a cache line (benchmarks/workers/core_round_trip.c), measured
around each launch of a benchmark: a small shared-memory collective is a chain of such trips, and
on a virtual machine the trip changes from second to second as the hypervisor moves the virtual
CPUs (measured here, runs half a second apart: 63-552 ns). A report shows it beside each launch, so
that two stacks are compared knowing whether they ran on the same machine state."""

import os
import shutil
import subprocess

from benchmarks.common.paths import ROOT, WORKERS_DIR

SOURCE = os.path.join(WORKERS_DIR, "core_round_trip.c")
BINARY = os.path.join(ROOT, "build", "benchmarks", "core_round_trip")


def _binary():
    """The probe, compiled on first use (and again when its source changes); None without a C compiler."""
    if os.path.exists(BINARY) and os.path.getmtime(BINARY) >= os.path.getmtime(SOURCE):
        return BINARY
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    os.makedirs(os.path.dirname(BINARY), exist_ok=True)
    proc = subprocess.run([cc, "-O2", "-pthread", "-o", BINARY, SOURCE], capture_output=True, text=True)
    return BINARY if proc.returncode == 0 else None


def measure(trips=100_000):
    """Mean nanoseconds of one round trip between the first two CPUs this process may use; None
    where there is one CPU or no compiler."""
    cpus = sorted(os.sched_getaffinity(0))
    binary = _binary()
    if len(cpus) < 2 or binary is None:
        return None
    try:
        proc = subprocess.run([binary, str(cpus[0]), str(cpus[1]), str(trips)], capture_output=True, text=True,
                              timeout=60)
        return float(proc.stdout.strip()) if proc.returncode == 0 else None
    except (subprocess.TimeoutExpired, ValueError):
        return None
