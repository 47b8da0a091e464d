"""torch.distributed on herring when a rank dies: torchrun's restarts reconnect and resume, and the
survivors are told how it died (tests/torch_distributed/workers/torch_restart_worker.py).

- torchrun --max-restarts 1: its agent keeps one store across attempts, so the restarted ranks
  must not read the first attempt's endpoints (they would dial ports nobody listens on, and wait
  out the 60 s start timeout); training resumed from a checkpoint ends with the weights of an
  uninterrupted run.
- An endpoint nobody listens on any more fails the mesh in seconds, naming the rank and address.
- A rank that dies by an uncaught exception (its exit handlers run) or SIGKILL is never reported
  as having shut down in order: the survivors read that it failed, or that its connection
  closed. Orderly departures keep their words (tests/torch_distributed/test_torch_distributed_departures.py).

Plain processes for the crashes (no launcher that stops the survivors before they report)."""

import importlib.util
import os
import re
import subprocess
import sys
import time

import pytest

import launch

WORKER = "tests/torch_distributed/workers/torch_restart_worker.py"
ORDERLY = "shut down in order"


def _worker_module():
    spec = importlib.util.spec_from_file_location("torch_restart_worker", os.path.join(launch.ROOT, WORKER))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _read(results, name):
    import json
    path = os.path.join(results, name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def test_torchrun_restart_reconnects_and_resumes_to_the_uninterrupted_weights():
    import torch
    results = launch.scratch_dir("herring-restarts-")
    # torchrun's agent stops the survivors as soon as it sees a rank exit (every 0.1 s by
    # default): looking every 2 s lets the first attempt's survivor report what it was told.
    run = launch.torchrun(2, [WORKER], timeout=240, options=["--max-restarts", "1", "--monitor-interval", "2"],
                          HERRING_SCENARIO="train", HERRING_TEST_RESULTS=results)
    out = run.output[-6000:]
    assert run.returncode == 0, f"exit status {run.returncode} after {run.seconds:.1f} s\n{out}"
    first = {r: _read(results, f"0.{r}.json") for r in range(2)}
    second = {r: _read(results, f"1.{r}.json") for r in range(2)}
    assert first[1] and first[1].get("raised_at_step") == 5, (first, out)
    # The first attempt's survivor was told that rank 1 failed, and how; not that it shut down in order.
    assert first[0] and "rank 1 failed (uncaught exception RuntimeError: injected failure" in first[0]["error"], first
    assert ORDERLY not in first[0]["error"], first[0]
    assert all(second.values()), (second, out)
    # Resumed from a checkpoint of the first attempt, not from the start.
    assert all(s["resumed_from"] and 1 <= s["resumed_from"] <= 5 for s in second.values()), second
    # The restarted group connected at once, its rank 0 a second late (reading the first attempt's
    # endpoints, rank 1 would dial a dead port: 60 s start timeout before, 3 s "is gone" now).
    # Hang guards, not performance bounds (the end to end time is mostly 4 Pythons importing torch).
    assert max(s["init_seconds"] for s in second.values()) < 20, second
    assert run.seconds < 90, f"the whole job took {run.seconds:.1f} s\n{out}"
    assert "connecting the TCP mesh" not in run.output and "is gone" not in run.output, out
    weights = torch.load(os.path.join(results, "weights.pt"))
    reference = _worker_module().reference_weights(2)
    for got, want in zip(weights, reference):
        assert torch.equal(got, want), f"max difference {(got - want).abs().max().item()}"
    print(f"job {run.seconds:.1f} s; restarted attempt's init "
          f"{max(s['init_seconds'] for s in second.values()):.1f} s; resumed from step {second[0]['resumed_from']}; "
          f"first attempt's survivor: {first[0] and first[0].get('error')}")


# The rank-0 record of an engine whose start failed after the exchange: its listener is closed
# when rank 1, given that record, builds the mesh.
_STALE_ENDPOINT = r"""
import time
from hvd_herring import _native, bootstrap
records = {}
def rank0(mine):
    records[0] = mine
    raise RuntimeError("rank 0 stops after the exchange")
try:
    _native.Engine([], 0, rank0, env=bootstrap.launch_environment(0, 2, master_addr="127.0.0.1"))
except Exception:
    pass
started = time.monotonic()
try:
    _native.Engine([], 0, lambda mine: [records[0], mine], env=bootstrap.launch_environment(1, 2, master_addr="127.0.0.1"))
    print("RESULT connected?!")
except Exception as e:
    print(f"RESULT {time.monotonic() - started:.2f} {e}")
"""


def test_an_endpoint_nobody_listens_on_fails_the_mesh_in_seconds_naming_rank_and_address():
    run = launch.python(["-c", _STALE_ENDPOINT], timeout=120, RANK=None, WORLD_SIZE=None,
                        HERRING_START_TIMEOUT_SECONDS=60)
    line = next((l for l in run.output.splitlines() if l.startswith("RESULT ")), None)
    assert line, run.output[-4000:]
    seconds, _, error = line[len("RESULT "):].partition(" ")
    assert "rank 0 is gone" in error and re.search(r"endpoint 127\.0\.0\.1:\d+ has refused", error), error
    assert float(seconds) < 10, line  # not the 60 s start timeout
    print(line)


def _crash_job(how):
    """Ranks 0-2 as plain processes (env://, rank 0 hosts torch's store); rank 2 dies by `how`."""
    results = launch.scratch_dir("herring-crash-")
    env = launch.herring_env(HERRING_SCENARIO="crash", HERRING_CRASH=how, HERRING_TEST_RESULTS=results,
                             MASTER_ADDR="127.0.0.1", MASTER_PORT=launch.free_port(), WORLD_SIZE=3,
                             HERRING_TEST_TIMEOUT=60)
    for name in ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_USE_AGENT_STORE"):
        env.pop(name, None)
    started = time.monotonic()
    procs = [subprocess.Popen([sys.executable, WORKER], cwd=launch.ROOT, env=dict(env, RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(3)]
    outputs, codes = [], []
    try:
        for p in procs:
            outputs.append(p.communicate(timeout=150)[0])
            codes.append(p.returncode)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    output = "\n".join(f"--- rank {r} (exit {c})\n{o[-3000:]}" for r, (o, c) in enumerate(zip(outputs, codes)))
    return {r: _read(results, f"{r}.json") for r in range(2)}, codes, output, time.monotonic() - started


def test_a_rank_that_raises_is_reported_failed_with_its_exception_not_shut_down_in_order():
    survivors, codes, output, seconds = _crash_job("exception")
    assert codes[2] == 1, output  # Python's status for an uncaught exception
    assert "ValueError: injected failure of rank 2" in output, output
    for r, got in survivors.items():
        assert got, output
        for what in ("world_error", "pair_error"):
            error = got[what]
            assert error, (r, what, output)
            assert ORDERLY not in error, (r, what, error)
            assert "rank 2 failed (uncaught exception ValueError: injected failure of rank 2" in error, (r, what, error)
        # Told while waiting for rank 2 in the collective, not at some timeout.
        assert got["world_error_seconds"] < 15, (r, got)
    print(f"{seconds:.1f} s; rank 0 read: {survivors[0]['world_error']}")


def test_a_rank_killed_by_sigkill_is_reported_lost_not_shut_down_in_order():
    survivors, codes, output, seconds = _crash_job("sigkill")
    assert codes[2] == -9, output
    for r, got in survivors.items():
        assert got, output
        for what in ("world_error", "pair_error"):
            error = got[what]
            assert error, (r, what, output)
            assert ORDERLY not in error and "left the job" not in error, (r, what, error)
            assert "rank 2" in error and "connection closed (process exited or killed?)" in error, (r, what, error)
        assert got["world_error_seconds"] < 15, (r, got)
    print(f"{seconds:.1f} s; rank 0 read: {survivors[0]['world_error']}")
