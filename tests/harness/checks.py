"""The one harness of the workers that run named checks inside every rank, and of the tests that
read what they report.

In a rank: `@check` registers a check (its function's name is the check's name); `run_and_report`
runs the registered checks in order, each "ok" or its traceback, writes what the test reads
($HERRING_TEST_RESULTS/<rank>.json: {"results": {check: "ok" | traceback}, ...}), prints the failed
ones to stderr and gives the exit status. All ranks run the same collectives in the same order and
compare only afterwards, so a failing check never leaves a peer waiting in a collective it skipped.
A worker imports its helpers from the harness (references.py), never from another worker: the
checks of every module that registers some would run.

In a test: `names_in(worker)` reads a worker's check names from its source (no import: no torch
or TensorFlow in the pytest process), to parametrize with; `assert_every_rank_reported` and
`assert_check_passed` read what the ranks wrote."""

import ast
import json
import os
import sys
import time
import traceback

CHECKS = []


def check(fn):
    """Registers `fn` as this worker's next check."""
    if CHECKS and CHECKS[0].__module__ != fn.__module__:
        raise RuntimeError(f"checks registered by {CHECKS[0].__module__} and {fn.__module__}: a worker "
                           f"imports its helpers from the harness, not from another worker")
    CHECKS.append(fn)
    return fn


def in_modes(**runners):
    """A decorator that registers one check per mode, named <function>.<mode>, each calling the
    function with its mode's runner: `both = in_modes(eager=run, function=trace)` then `@both`."""
    def register(body):
        for mode, runner in runners.items():
            def one(runner=runner):
                body(runner)
            one.__name__ = one.__qualname__ = f"{body.__name__}.{mode}"
            one.__module__ = body.__module__
            check(one)
        return body
    return register


def selected(checks=None):
    """The checks (the registered ones by default) that HERRING_TEST_ONLY names, comma-separated,
    in their order; all of them where it is unset."""
    checks = CHECKS if checks is None else checks
    only = os.environ.get("HERRING_TEST_ONLY")
    return [fn for fn in checks if not only or fn.__name__ in only.split(",")]


def run_checks(checks, after_each=None):
    """Runs each check in order: {name: "ok" | its traceback}. after_each(fn, results, seconds)
    follows every check, failed or not."""
    results = {}
    for fn in checks:
        start = time.monotonic()
        try:
            fn()
            results[fn.__name__] = "ok"
        except Exception:  # noqa: BLE001 - reported per check
            results[fn.__name__] = traceback.format_exc()
        if after_each:
            after_each(fn, results, time.monotonic() - start)
    return results


def write_report(rank, report, directory=None):
    """Writes `report` to <directory>/<rank>.json, $HERRING_TEST_RESULTS by default (nothing where
    neither is set)."""
    directory = directory or os.environ.get("HERRING_TEST_RESULTS")
    if directory:
        with open(os.path.join(directory, f"{rank}.json"), "w") as f:
            json.dump(report, f)


def report_failures(rank, results):
    """Prints each failed check with its traceback to stderr; returns the exit status (1 if one failed)."""
    failed = [name for name, outcome in results.items() if outcome != "ok"]
    for name in failed:
        print(f"rank {rank}: {name} FAILED\n{results[name]}", file=sys.stderr)
    return 1 if failed else 0


def progress(rank):
    """An after_each for run_and_report: each check's outcome and time in the launcher's output
    (where a hung or slow job stopped), and the results so far written after every check (if a
    failure leaves the ranks out of step and the job has to be killed, what ran is still reported)."""
    def after_each(fn, results, seconds):
        print(f"rank {rank}: {fn.__name__} {'ok' if results[fn.__name__] == 'ok' else 'FAILED'} "
              f"({seconds:.2f} s)", file=sys.stderr, flush=True)
        write_report(rank, {"results": results})
    return after_each


def run_and_report(rank, checks, report=None, shutdown=None, after_each=None, directory=None):
    """Runs `checks`, writes {"results": ..., **report()} (report() is called after the checks),
    prints the failed ones, then calls shutdown(). Returns the exit status: 1 if a check failed."""
    results = run_checks(checks, after_each)
    write_report(rank, {"results": results, **(report() if report else {})}, directory)
    status = report_failures(rank, results)
    if shutdown:
        shutdown()
    return status


# --- the test's side -------------------------------------------------------------------------------

def names_in(worker):
    """The names of a worker's checks in the order it runs them, read from its source (a path from
    the repository root or absolute): the module's functions decorated with @check, and with a
    decorator made by in_modes(<mode>=...) one name per mode, <function>.<mode>."""
    path = worker if os.path.isabs(worker) else os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), worker)
    with open(path) as f:
        tree = ast.parse(f.read(), path)

    def called(node):
        target = node.func if isinstance(node, ast.Call) else node
        return target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", None)

    modes = {}   # decorator name -> its modes, from `name = in_modes(a=..., b=...)`
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and called(node.value) == "in_modes":
            for target in node.targets:
                modes[target.id] = [k.arg for k in node.value.keywords]
    names = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            for decorator in node.decorator_list:
                if called(decorator) == "check":
                    names.append(node.name)
                elif called(decorator) in modes:
                    names += [f"{node.name}.{mode}" for mode in modes[called(decorator)]]
    if not names:
        raise AssertionError(f"{worker} registers no check")
    return names


def assert_every_rank_reported(name, ranks, run, per_rank):
    """Every rank in `ranks` wrote its results and the launch exited 0."""
    assert sorted(per_rank) == list(ranks), f"{name}: ranks reported {sorted(per_rank)}\n{run.output[-4000:]}"
    assert run.returncode == 0, f"{name}: exit status {run.returncode}\n{run.output[-6000:]}"


def assert_check_passed(name, check, run, per_rank):
    """`check` ran and passed on every rank that reported."""
    assert per_rank, f"{name}: no rank reported\n{run.output[-4000:]}"
    for r, data in sorted(per_rank.items()):
        assert check in data["results"], f"{name}: rank {r} did not run {check}"
        assert data["results"][check] == "ok", f"{name}: rank {r}: {data['results'][check]}"


def assert_checks_per_rank(run, per_rank, expected):
    """expected: {rank: [checks]}: exactly these ranks reported, each ran exactly its checks, and
    every one passed (for workers whose ranks run different checks, as in a departure scenario)."""
    assert sorted(per_rank) == sorted(expected), f"ranks reported {sorted(per_rank)}\n{run.output[-5000:]}"
    for r, checks in sorted(expected.items()):
        got = per_rank[r]["results"]
        assert sorted(got) == sorted(checks), (r, sorted(got), run.output[-3000:])
        bad = {c: got[c] for c in checks if got[c] != "ok"}
        assert not bad, f"rank {r}:\n" + "\n".join(f"--- {c}\n{t}" for c, t in bad.items())


def launch_tests(check_names, reporting_ranks=lambda name, np: range(np)):
    """The two tests of a file whose module fixture `launched` gives (name, np, run, per_rank) for a
    launch of a worker, to take as its own:
        test_every_rank_reported, test_check = checks.launch_tests(CHECK_NAMES)
    test_every_rank_reported: the ranks reporting_ranks(name, np) wrote their results and the launch
    exited 0; test_check, one per name of `check_names`: that check ran and passed on every rank."""
    import pytest

    def test_every_rank_reported(launched):
        name, np, run, per_rank = launched
        assert_every_rank_reported(name, reporting_ranks(name, np), run, per_rank)

    @pytest.mark.parametrize("check", check_names)
    def test_check(launched, check):
        name, np, run, per_rank = launched
        assert_check_passed(name, check, run, per_rank)

    return test_every_rank_reported, test_check


def failed_checks(names, data):
    """{check: what it reported, or "not run"} for the checks of `names` one rank did not pass."""
    return {c: data["results"].get(c, "not run") for c in names if data["results"].get(c) != "ok"}
