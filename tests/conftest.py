import glob
import os
import sys

import pytest

TESTS = os.path.dirname(os.path.abspath(__file__))
# The repository root: the development tools (tools/simcluster) are not part of the installed package.
sys.path.insert(0, os.path.dirname(TESTS))
# The shared test code (launch, engine_jobs, ...), and every area folder: a test imports the helpers
# of another area's test by module name (test_collectives, test_elastic_workers, ...). tests/ itself
# stays off the path (it is a package): its folder tensorflow/ must not stand in for TensorFlow.
sys.path[1:1] = [os.path.join(TESTS, "harness")] + sorted(
    {os.path.dirname(p) for p in glob.glob(os.path.join(TESTS, "*", "**", "test_*.py"), recursive=True)})

import machine_share  # noqa: E402 - from the harness, on the path just above

# One intra-op thread per process, as torchrun, Ray and Spark give their ranks: the suite runs 2 to 8
# ranks beside another file's job on 2 cores, and torch's OpenMP threads spin while they wait for
# work, so every rank's second thread took the CPU its neighbours needed (measured: a 3-rank job of
# small collectives used 21.7 CPU-s with the default 2 threads per rank and 10.2 with 1; Horovod's
# torch suite at np=3, 50.6 and 36.9). Every launch inherits it; a test that needs more sets its own.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# Tiers follow folders. The default run (what CI runs) is everything but the separate tiers below.
# The fast tier (`bash scripts/test.sh --fast`, a few minutes) is the native unit tests and layers,
# the switch and one multi-process smoke per framework and launch path: files of several areas, so
# each says it itself (`pytestmark = pytest.mark.fast`; tests/README.md lists them).
#
# Separate tiers: heavy suites that run with their own command, not in the default run. CI's budget
# is 90 minutes for the set-up and the suite on a 2-core machine, and on a slow one (measured
# 2026-11-29: the whole suite 77 min, set-up 8) the default run must fit with room to spare. A
# separate tier is a folder (every test below it; tier -> folder under tests/, what it holds) or,
# where it is single tests of a file, their marker (folder None). It runs when `-m` names it
# (`bash scripts/test.sh -m cluster_engines`), when its folder or one of its files is named
# (`bash scripts/test.sh tests/cluster_engines/applications`), or with --all-tiers
# (`bash scripts/test.sh --all`); the default run says at its end what it left out.
SEPARATE_TIERS = {
    "cluster_engines": ("cluster_engines/applications", "whole Spark and Ray applications (executor JVMs, "
                                                        "raylets) on the launch paths of their users"),
    "sanitizers": ("native/sanitizers", "the native core under AddressSanitizer and UBSan"),
    "horovod_suites_wide": (None, "Horovod's suites at the rank counts and Keras versions past each suite's "
                                  "run in the default tier (marked in horovod_api/test_horovod_suites.py)"),
    "elastic_wide": (None, "elastic scenarios under TensorFlow whose worker paths another TensorFlow "
                           "scenario of the default tier takes (marked in elastic/test_elastic_workers.py)"),
}


# The files that take longest go first: scripts/test.sh runs the files in two workers (pytest-xdist,
# one file at a time each, in this order), and a long file left to the end would keep one worker busy
# alone. Seconds per file are printed at the end of every run (below); these were the longest of the
# fresh-clone run of 2026-12-07 14:21 UTC. The `exclusive` files go before them all: each runs alone, so
# they take their turns while the other worker has nothing long under way.
LONGEST_FIRST = ["horovod_api/test_horovod_suites.py", "elastic/test_elastic_workers.py",
                 "reliability/test_reliability.py", "torch_distributed/test_torch_distributed.py",
                 "ops/test_peer_tensor_reads.py", "cluster/test_eflops.py", "horovod_api/test_collectives.py",
                 "horovod_api/test_adasum.py", "engine/test_small_messages.py",
                 "torch_distributed/test_torch_c10d_suites.py", "reliability/test_control_plane.py",
                 "torch_distributed/test_torch_backend_suite.py", "packaging/test_wheel.py"]


def pytest_addoption(parser):
    parser.addoption("--all-tiers", action="store_true",
                     help="run the separate tiers too (" + ", ".join(SEPARATE_TIERS) + ")")


def pytest_configure(config):
    config.addinivalue_line("markers", "fast: part of the fast tier (scripts/test.sh --fast)")
    for tier, (folder, what) in SEPARATE_TIERS.items():
        where = f" (tests/{folder})" if folder else ""
        config.addinivalue_line("markers", f"{tier}: separate tier, {what}{where}")
    config.addinivalue_line("markers", "exclusive: the file runs alone when the suite runs in several workers "
                                       "(it compares machine-wide state before and after: tests/harness/machine_share.py)")


def _inside(path, folder):
    return path == folder or path.startswith(folder + os.sep)


def _separate_tier(item):
    """(tier, the path that names it: its folder, or for a marked test its file), or (None, None)."""
    path = str(item.path)
    for tier, (folder, _) in SEPARATE_TIERS.items():
        if folder and _inside(path, os.path.join(TESTS, folder)):
            item.add_marker(getattr(pytest.mark, tier))
            return tier, os.path.join(TESTS, folder)
        if not folder and item.get_closest_marker(tier):
            return tier, path
    return None, None


def _paths_named_on_the_command_line(config):
    base = str(config.invocation_params.dir)
    return [os.path.normpath(os.path.join(base, arg.split("::")[0])) for arg in config.args]


def pytest_collection_modifyitems(config, items):
    markexpr = config.getoption("markexpr") or ""
    named = _paths_named_on_the_command_line(config)
    kept, left_out = [], []
    config._herring_left_out = {}
    for item in items:
        tier, home = _separate_tier(item)
        # Named: a path on the command line at or below the tier's folder (its file, for a marked test).
        if tier and not (config.getoption("all_tiers") or tier in markexpr
                         or any(_inside(str(item.path), p) and _inside(p, home) for p in named)):
            left_out.append(item)
            config._herring_left_out[tier] = config._herring_left_out.get(tier, 0) + 1
        else:
            kept.append(item)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
    items[:] = sorted(kept, key=_run_order(kept))


def _run_order(items):
    """A sort key that keeps each file's tests together and in their order: the exclusive files
    first, then LONGEST_FIRST, then the others as collected."""
    first_seen = {}
    for i, item in enumerate(items):
        first_seen.setdefault(item.path, i)
    longest = {os.path.join(TESTS, p): i for i, p in enumerate(LONGEST_FIRST)}

    def key(item):
        exclusive = item.get_closest_marker("exclusive") is not None
        return (not exclusive, longest.get(str(item.path), len(longest)), first_seen[item.path])
    return key


# Under xdist, each file holds its share of the machine from its first test to its last (module
# fixtures included): shared, or alone for an exclusive one.
_share = None
_file_holding_the_share = None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    global _share, _file_holding_the_share
    if _share is None:
        _share = machine_share.for_this_worker() or False
    if _share and _file_holding_the_share != item.path:
        _share.enter(exclusive=item.get_closest_marker("exclusive") is not None)
        _file_holding_the_share = item.path
    yield
    if _share and (nextitem is None or nextitem.path != item.path):
        _share.leave()
        _file_holding_the_share = None


def pytest_sessionfinish(session):
    if _share:
        _share.remove()
    if hasattr(session.config, "workeroutput"):  # an xdist worker: the controller prints what it left out
        session.config.workeroutput["herring_left_out"] = getattr(session.config, "_herring_left_out", {})


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """xdist's controller collects nothing itself: the tiers a worker left out come with its end
    (every worker collects the whole run, so any one's counts are the run's)."""
    left_out = getattr(node, "workeroutput", {}).get("herring_left_out")
    if left_out:
        node.config._herring_left_out = left_out


# Seconds per test file (set-up, call and tear-down): the budget is spent by file, so every run
# prints where it went.
_seconds_by_file = {}


def pytest_runtest_logreport(report):
    path = report.nodeid.split("::")[0]
    _seconds_by_file[path] = _seconds_by_file.get(path, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter, config):
    if _seconds_by_file:
        terminalreporter.write_sep("=", "seconds per test file")
        for path, seconds in sorted(_seconds_by_file.items(), key=lambda kv: -kv[1]):
            terminalreporter.write_line(f"{seconds:8.1f} s  {path}")
        terminalreporter.write_line(f"{sum(_seconds_by_file.values()):8.1f} s  in all")
    left_out = getattr(config, "_herring_left_out", {})
    if left_out:
        terminalreporter.write_sep("=", "separate tiers left out of this run")
        for tier, count in sorted(left_out.items()):
            terminalreporter.write_line(f"{tier}: {count} tests, {SEPARATE_TIERS[tier][1]}: "
                                        f"bash scripts/test.sh -m {tier}")
        terminalreporter.write_line("all of them: bash scripts/test.sh --all")
