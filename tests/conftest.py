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

# The fast tier (`bash scripts/test.sh --fast`, a few minutes): the native unit tests, the switch,
# and one multi-process smoke per framework and launch path. The default run (what CI runs) is
# everything but the separate tiers below.
FAST_TIER = {
    "test_native.py",             # every native case (GoogleTest), no processes
    "test_layers.py",             # the native folders include only the layers below them
    "test_switch.py",             # HOROVOD_BACKEND=herring, horovodrun's build check, the knob table
    "test_cycle_policy.py",       # torch under horovodrun: lone requests and bursts
    "test_training.py",           # torch training against a single-process reference
    "test_tensorflow_training.py",  # TensorFlow 2 / Keras 3 training against references
    "test_mpirun.py",             # the mpirun launch path
}


# Separate tiers: heavy suites that run with their own command, not in the default run (what CI
# runs). CI's budget is 90 minutes for the set-up and the suite on a 2-core machine, and on a slow
# one (measured 2026-11-29: the whole suite 77 min, set-up 8) the default run must fit with room to
# spare. A separate tier runs when `-m` names it (`bash scripts/test.sh -m cluster_engines`), when
# one of its files is named (`bash scripts/test.sh tests/cluster_engines/applications/test_spark.py`), or with --all-tiers
# (`bash scripts/test.sh --all`); the default run says at its end what it left out.
SEPARATE_TIERS = {
    "cluster_engines": "Spark and Ray launch paths (tests/cluster_engines/applications/test_spark.py, test_ray.py)",
    "sanitizers": "the native core under AddressSanitizer and UBSan (tests/native/sanitizers/test_sanitizers.py)",
    "horovod_suites_wide": "Horovod's suites at the rank counts and Keras versions past each suite's "
                           "run in the default tier (tests/horovod_api/test_horovod_suites.py)",
}
# Whole files in a separate tier; single tests join one by their marker (test_horovod_suites.py).
SEPARATE_TIER_FILES = {"test_spark.py": "cluster_engines", "test_ray.py": "cluster_engines",
                       "test_sanitizers.py": "sanitizers"}


def pytest_addoption(parser):
    parser.addoption("--all-tiers", action="store_true",
                     help="run the separate tiers too (" + ", ".join(SEPARATE_TIERS) + ")")


def pytest_configure(config):
    config.addinivalue_line("markers", "fast: part of the fast tier (scripts/test.sh --fast)")
    for tier, what in SEPARATE_TIERS.items():
        config.addinivalue_line("markers", f"{tier}: separate tier, {what}")


def _separate_tier(item, file_name):
    tier = SEPARATE_TIER_FILES.get(file_name)
    if tier:
        item.add_marker(getattr(pytest.mark, tier))
        return tier
    return next((t for t in SEPARATE_TIERS if item.get_closest_marker(t)), None)


def _files_named_on_the_command_line(config):
    return {os.path.basename(arg.split("::")[0]) for arg in config.args if arg.split("::")[0].endswith(".py")}


def pytest_collection_modifyitems(config, items):
    markexpr = config.getoption("markexpr") or ""
    named = _files_named_on_the_command_line(config)
    kept, left_out = [], []
    config._herring_left_out = {}
    for item in items:
        name = os.path.basename(str(item.fspath))
        if name in FAST_TIER:
            item.add_marker(pytest.mark.fast)
        tier = _separate_tier(item, name)
        if tier and not (config.getoption("all_tiers") or tier in markexpr or name in named):
            left_out.append(item)
            config._herring_left_out[tier] = config._herring_left_out.get(tier, 0) + 1
        else:
            kept.append(item)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept


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
            terminalreporter.write_line(f"{tier}: {count} tests, {SEPARATE_TIERS[tier]}: "
                                        f"bash scripts/test.sh -m {tier}")
        terminalreporter.write_line("all of them: bash scripts/test.sh --all")
