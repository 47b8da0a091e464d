"""Elastic dedicated servers (PSLD): a server joins a running job (python -m hvd_herring.server
join), a launched one is retired (hvd_herring.remove_server), the joined one leaves on SIGTERM;
every change happens between two steps on every rank, and training gives bitwise the same weights
as a run with a fixed set of servers (no gradient lost or counted twice)."""

import json
import os

import pytest

import launch

WORKER = os.path.join("tests", "elastic", "workers", "elastic_worker.py")


def train(elastic, **env):
    results = launch.scratch_dir("herring-elastic-")
    # Workers 0-3 on simulated hosts 0 and 1, launched servers 4 and 5 on host 2; the joiner
    # reports host 3.
    run = launch.horovodrun(6, [launch.AS_SIMULATED_HOST, "2", WORKER],
                            timeout=300, HERRING_TEST_RESULTS=results, HERRING_DEDICATED_SERVERS=2,
                            HERRING_ELASTIC_SLOTS=2, HERRING_TEST_ELASTIC=1 if elastic else 0, **env)
    assert run.returncode == 0, run.output[-5000:]
    out = {}
    for r in range(4):
        with open(os.path.join(results, f"{r}.json")) as f:
            out[r] = json.load(f)
    return out, run.output


# Worker 1 late in every cycle, before it takes its sums from the servers: its host's other rank
# waits for it in the shared-memory all-gather while a retiring server, done with the cycle that
# retires it, says goodbye. That goodbye is expected (the race CI met once, forced here). CI met
# a second one in this job: the server's goodbye handled before a worker's thread had marked its
# last push, already read by the server, as sent; native transport_test forces that one
# (TransportSendWrittenBeforeThePeersGoodbyeSucceeds).
LATE_WORKER = {"HERRING_FAULT": "delay:pull:1"}


@pytest.fixture(scope="module")
def runs():
    return {"elastic": train(True), "static": train(False), "elastic-late-worker": train(True, **LATE_WORKER)}


@pytest.mark.parametrize("run", ["elastic", "elastic-late-worker"])
def test_servers_joined_and_left_between_steps(runs, run):
    results, output = runs[run]
    seen = [tuple(l["shards"]) for l in results[0]["layouts"] if "shards" in l]
    assert seen[0] == (4, 5)
    assert (4, 5, 6) in seen, seen      # the joiner took the next free rank and got a shard
    assert (5, 6) in seen, seen         # server 4 retired
    assert seen[-1] == (5,), seen       # the joiner left on SIGTERM
    # The layout only ever moves through these states, in this order.
    order = [s for i, s in enumerate(seen) if i == 0 or s != seen[i - 1]]
    assert order == [(4, 5), (4, 5, 6), (5, 6), (5,)], order
    assert results[0]["joiner_exit"] == 0
    assert results[0]["counters"]["membership_changes"] == 3
    assert "hvd_herring: joined as dedicated server rank 6" in output
    if run == "elastic-late-worker":
        assert "HERRING_FAULT: delay at pull" in output, output[-3000:]


@pytest.mark.parametrize("run", ["elastic", "elastic-late-worker"])
def test_every_worker_saw_the_same_changes(runs, run):
    results, _ = runs[run]
    for r in range(1, 4):
        assert results[r]["counters"]["membership_changes"] == 3


def test_training_identical_to_fixed_servers(runs):
    digests = {res["digest"] for run, _ in runs.values() for res in run.values()}
    assert len(digests) == 1, digests
