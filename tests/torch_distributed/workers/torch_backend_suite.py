"""Runs torch's own backend suite (torch/testing/_internal/distributed/distributed_test.py, shipped in
the installed wheel: DistributedTest._DistTestBase) against one backend, as torch's
test/distributed/test_distributed_spawn.py does, and writes every test's outcome as JSON.

    BACKEND=herring WORLD_SIZE=2 HERRING_SUITE_RESULTS=out.json python torch_backend_suite.py

What is torch's: the test bodies, TestDistBackend's per-test launch (one process per rank,
`init_process_group(init_method="file://...", rank=r, world_size=n)`, no RANK variable), its file
barrier and its per-test return-code checks. What differs from test_distributed_spawn.py:
- a backend other than gloo/nccl/ucc is a plugin: its name goes into
  DistTestCases.backend_feature["plugin"] (the suite's own mechanism, read by its decorators when
  distributed_test.py is imported, so before that), and into the "ddp" and "subgroup" feature
  sets, and importing its package registers it;
- the ranks are forked rather than spawned (MultiProcessTestCase._start_processes with the "fork"
  context, as torch's former test_distributed_fork.py did): a spawned rank re-imports torch
  (about 3 s here) for each of the suite's ~300 tests. This process creates no process group and
  runs no tensor op before forking, so the children start clean.
HERRING_SUITE_ONLY (a regex) picks tests by name; DISTRIBUTED_TESTS_DEFAULT_TIMEOUT (torch's) bounds
each test."""

import json
import os
import re
import sys
import tempfile
import time
import traceback
import types
import unittest

BACKEND = os.environ["BACKEND"]
TORCH_BACKENDS = ("gloo", "nccl", "ucc", "mpi")

os.environ.setdefault("TEMP_DIR", tempfile.mkdtemp(prefix="torch-suite-"))  # torch's suite reads it at import
os.makedirs(os.path.join(os.environ["TEMP_DIR"], "barrier"), exist_ok=True)
os.environ.pop("RANK", None)  # torch's harness hands each rank its rank explicitly
# run_test.py's file:// configuration (the suite also reads it at import, e.g. for the store-less timeout tests)
os.environ.setdefault("INIT_METHOD", "file://" + os.path.join(os.environ["TEMP_DIR"], "init_file"))

import torch  # noqa: E402
from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

if BACKEND not in TORCH_BACKENDS:
    DistTestCases.backend_feature["plugin"].add(BACKEND)
    # What the plugin implements on CPU, in the suite's own feature sets (not "gpu"/"cuda"):
    # DistributedDataParallel and subgroups. The tests torch gates on the backend's NAME
    # (gloo-only) stay skipped: the pytest side lists them with torch's reason.
    DistTestCases.backend_feature["ddp"].add(BACKEND)
    DistTestCases.backend_feature["subgroup"].add(BACKEND)
    import hvd_herring.torch.distributed  # noqa: E402,F401  registers "herring"

from torch.testing._internal.distributed.distributed_test import DistributedTest, TestDistBackend  # noqa: E402

_FORK = torch.multiprocessing.get_context("fork").Process


class TestDistBackendWithFork(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._start_processes(_FORK)


def _lift_gates(cls, reasons):
    """HERRING_SUITE_LIFT: the tests whose skip reason matches this regex (torch's gates on the
    backend's name: "requires backend ... to be one of {'gloo'}", "only supported on mpi, nccl and
    gloo"...) run anyway, their bodies unchanged: how the plugin fares where torch never asks.
    unittest reads the skip from the test function's attributes, so a copy without them runs."""
    lifted = []
    for name in unittest.TestLoader().getTestCaseNames(cls):
        fn = getattr(cls, name)
        if getattr(fn, "__unittest_skip__", False) and reasons.search(getattr(fn, "__unittest_skip_why__", "")):
            copy = types.FunctionType(fn.__code__, fn.__globals__, name, fn.__defaults__, fn.__closure__)
            copy.__dict__.update({k: v for k, v in fn.__dict__.items() if not k.startswith("__unittest_skip")})
            copy.__wrapped__ = getattr(fn, "__wrapped__", fn)
            setattr(cls, name, copy)
            lifted.append(name)
    return lifted


class _Recorder(unittest.TextTestResult):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.outcomes = {}
        self._started = {}

    def _name(self, test):
        return test.id().rsplit(".", 1)[-1]

    def startTest(self, test):
        self._started[self._name(test)] = time.monotonic()
        super().startTest(test)

    def _record(self, test, outcome, detail=""):
        name = self._name(test)
        self.outcomes[name] = {"outcome": outcome, "detail": detail,
                               "seconds": round(time.monotonic() - self._started.get(name, time.monotonic()), 2)}

    def addSuccess(self, test):
        super().addSuccess(test)
        self._record(test, "passed")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._record(test, "failed", "".join(traceback.format_exception(*err))[-6000:])

    def addError(self, test, err):
        super().addError(test, err)
        self._record(test, "failed", "".join(traceback.format_exception(*err))[-6000:])

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._record(test, "skipped", str(reason))

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._record(test, "passed", "expected failure")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._record(test, "failed", "unexpected success")


def main():
    lifted = []
    if os.environ.get("HERRING_SUITE_LIFT"):
        lifted = _lift_gates(TestDistBackendWithFork, re.compile(os.environ["HERRING_SUITE_LIFT"]))
    only = re.compile(os.environ.get("HERRING_SUITE_ONLY", ".*"))
    names = [n for n in unittest.TestLoader().getTestCaseNames(TestDistBackendWithFork) if only.search(n)]
    suite = unittest.TestSuite(TestDistBackendWithFork(n) for n in names)
    runner = unittest.TextTestRunner(stream=sys.stdout, verbosity=2, resultclass=_Recorder)
    start = time.monotonic()
    result = runner.run(suite)
    out = {"backend": BACKEND, "world_size": int(os.environ["WORLD_SIZE"]), "torch": torch.__version__,
           "seconds": round(time.monotonic() - start, 1), "lifted": lifted, "tests": result.outcomes}
    with open(os.environ["HERRING_SUITE_RESULTS"], "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
