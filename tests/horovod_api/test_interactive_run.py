"""horovod.run(): Horovod's programmatic launcher (notebooks, Horovod's test_interactiverun.py)
from a plain Python process under HOROVOD_BACKEND=herring returns every rank's result, for a torch
function and a TensorFlow function. horovod.run exports HOROVOD_CYCLE_TIME='(None,)' and
HOROVOD_CACHE_CAPACITY='(None,)' (a stray comma in Horovod's source), which Horovod's core reads as
0; the engine must too, instead of failing hvd.init() on every rank."""

import importlib.util
import json
import os

import pytest

import launch

WORKER = os.path.join(launch.ROOT, "tests", "horovod_api", "workers", "interactive_run.py")


def _results(run):
    lines = [l for l in run.output.splitlines() if l.startswith("RESULTS ")]
    assert run.returncode == 0 and lines, run.output[-5000:]
    return json.loads(lines[-1][len("RESULTS "):])


def test_horovod_run_torch_function_returns_every_ranks_result():
    np = 3
    results = _results(launch.python([WORKER, "torch", str(np)], timeout=300))
    assert len(results) == np
    for r, res in enumerate(results):  # horovod.run returns the results in rank order
        assert res["rank"] == r and res["size"] == np
        assert res["sum"] == 10.0 * (1 + 2 + 3)
        assert res["ranks"] == [0, 1, 2]
        assert res["knobs"] == ["(None,)", "(None,)"]  # what Horovod's launcher really exports


@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="TensorFlow is not installed")
def test_horovod_run_tensorflow_function_returns_every_ranks_result():
    np = 2
    results = _results(launch.python([WORKER, "tensorflow", str(np)], timeout=300))
    assert [res["rank"] for res in results] == [0, 1]
    assert all(res["size"] == np and res["sum"] == 10.0 * (1 + 2) for res in results)
