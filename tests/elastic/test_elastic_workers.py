"""Elastic workers under horovodrun's elastic driver (issue 11): real `horovodrun --min-np
--max-np --host-discovery-script` launches of an hvd.elastic.run script whose discovery output
changes while it trains, on one machine with two host names (localhost, 127.0.0.1) and a third
(this machine's IPv4 address) for a replacement host.

Each scenario is one launch (tests/elastic/workers/elastic_common.py says what happens at which step);
its tests check the sizes, ranks and hosts that each round saw, what the job's output says, and
that the final weights equal a float64 reference replaying exactly the committed steps (no
gradient lost or counted twice). Workers: torch, TF2 (GradientTape), and model.fit with Horovod's
elastic callbacks under Keras 3 and Keras 2 (tf_keras). test_cluster.py runs the torch worker
across simulated hosts."""

import json
import os
import sys

import numpy as np
import pytest

import launch
from tiers import param_in_tier

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "workers"))
import elastic_common as common  # noqa: E402

A, B = common.HOST_A, common.HOST_B
WORKERS = {"torch": os.path.join("tests", "elastic", "workers", "elastic_torch_worker.py"),
           "tf": os.path.join("tests", "elastic", "workers", "elastic_tf_worker.py"),
           "keras3": os.path.join("tests", "elastic", "workers", "elastic_keras_worker.py"),
           "keras2": os.path.join("tests", "elastic", "workers", "elastic_keras_worker.py")}
# What selects the Keras flavour of tf.keras (unset: Keras 3, TensorFlow's default).
FRAMEWORK_ENV = {"keras2": {"TF_USE_LEGACY_KERAS": "1"}}
TIMEOUT = 240  # bound of one launch; a scenario takes 10-40 s here


class Outcome:
    def __init__(self, run, results, scenario, shm_before=()):
        self.run = run
        self.shm_before = set(shm_before)  # herring's names in /dev/shm before the launch
        self.total_steps = common.STEPS_OF.get(scenario, common.STEPS)
        self.output = run.output
        self.events = common.read_events(results)
        final = os.path.join(results, "final.json")
        self.final = json.load(open(final)) if os.path.exists(final) else None

    def steps(self):
        return [e for e in self.events if e["event"] == "step"]

    def rounds(self):
        """[(size, {rank: host})...] in the order the sizes were trained at (consecutive steps of
        one membership form one round)."""
        by_step_size = {}
        for e in self.steps():
            by_step_size.setdefault((e["step"], e["size"]), {})[e["rank"]] = e["host"]
        out = []
        for (step, size), ranks in sorted(by_step_size.items(), key=lambda kv: min(
                e["t"] for e in self.steps() if (e["step"], e["size"]) == kv[0])):
            if not out or out[-1] != (size, ranks):
                out.append((size, ranks))
        return out

    def check_places(self):
        """What hvd reported in each round matches the driver's layout (two slots per host)."""
        rounds = [e for e in self.events if e["event"] == "round"]
        assert rounds
        for e in rounds:
            assert (e["local_size"], e["cross_size"]) == (2, e["size"] // 2), e
            assert e["rank"] == 2 * e["cross_rank"] + e["local_rank"], e

    def check_round_state(self):
        """What each round rebuilt for its membership: the response cache serves it (hits grow
        over a round's steps on every rank), and the round's process set (torch) gives its
        members' sum."""
        rounds_of_pid, by_round = {}, {}
        for e in self.events:              # in time order: a step belongs to its process's last round
            if e["event"] == "round":
                rounds_of_pid[e["pid"]] = rounds_of_pid.get(e["pid"], 0) + 1
            elif e["event"] == "step":
                by_round.setdefault((e["pid"], rounds_of_pid.get(e["pid"], 0)), []).append(e)
                if "evens_sum" in e:
                    members = len(range(0, e["size"], 2))
                    assert (e["evens_size"], e["evens_sum"]) == (members, members * (e["step"] + 1.0)), e
        for steps in by_round.values():
            if len(steps) >= 4:
                assert steps[-1]["cache_hits"] > steps[0]["cache_hits"], steps
        return by_round

    def check_weights(self, two_slots_per_host=True):
        if two_slots_per_host:
            self.check_places()
            self.check_round_state()
        assert self.final is not None, self.output[-4000:]
        history = [tuple(h) for h in self.final["history"]]
        assert [s for s, _ in history] == list(range(self.total_steps)), history  # each step once
        w, b = common.reference(history, lr=self.final["lr"], momentum=self.final["momentum"])
        np.testing.assert_allclose(np.array(self.final["weight"]), w, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(np.array(self.final["bias"]), b, rtol=1e-10, atol=1e-12)
        return history


def elastic_launch(framework, scenario, np_, hosts, min_np, max_np, extra=(), env=None, private_shm=False):
    results = launch.scratch_dir(f"herring-elastic-{scenario}-")
    hosts_file, discover = common.write_discovery(results, hosts)
    # --network-interface: without it the driver waits for two hosts to compare interfaces.
    cmd = [os.path.join(launch.BIN, "horovodrun"), "-np", str(np_), "--min-np", str(min_np),
           "--max-np", str(max_np), "--host-discovery-script", discover, "--network-interface", "lo",
           *extra, sys.executable, WORKERS[framework]]
    env = launch.herring_env(HERRING_TEST_RESULTS=results, HERRING_TEST_SCENARIO=scenario,
                             HERRING_TEST_HOSTS_FILE=hosts_file, HOROVOD_DYNAMIC_PROCESS_SETS=1,
                             PYTHONPATH=os.pathsep.join(launch.import_path()), **FRAMEWORK_ENV.get(framework, {}), **(env or {}))
    # A job with a /dev/shm of its own (launch.PRIVATE_SHM_SCRIPT) starts with none of herring's names.
    shm_before = [] if private_shm else common.herring_shm_names()
    return Outcome(launch._run(cmd, env, TIMEOUT, private_shm), results, scenario, shm_before)


_cache = {}


def outcome(framework, scenario):
    """One launch per (framework, scenario), shared by the tests that check it."""
    key = (framework, scenario)
    if key not in _cache:
        _cache[key] = elastic_launch(framework, scenario, **LAUNCHES[scenario])
    return _cache[key]


LAUNCHES = {
    "add_remove": dict(np_=2, hosts=[f"{A}:2"], min_np=1, max_np=4),
    "raise_then_replace": dict(np_=4, hosts=[f"{A}:2", f"{B}:2"], min_np=2, max_np=4),
    "kill_no_replacement": dict(np_=4, hosts=[f"{A}:2", f"{B}:2"], min_np=2, max_np=4),
    "kill_then_replace": dict(np_=4, hosts=[f"{A}:2", f"{B}:2"], min_np=2, max_np=4),
    "kill_rank0": dict(np_=4, hosts=[f"{A}:2", f"{B}:2"], min_np=2, max_np=4),
    "all_fail": dict(np_=4, hosts=[f"{A}:2", f"{B}:2"], min_np=2, max_np=4),
    "reset_limit": dict(np_=2, hosts=[f"{A}:2"], min_np=1, max_np=4, extra=("--reset-limit", "1")),
    "below_min_np": dict(np_=4, hosts=[f"{A}:2", f"{B}:2"], min_np=4, max_np=4,
                         extra=("--elastic-timeout", "8")),
    "blacklist_cooldown": dict(np_=4, hosts=[f"{A}:2", f"{B}:2"], min_np=2, max_np=4,
                               extra=("--blacklist-cooldown-range", "1", "2")),
    "many_resets": dict(np_=2, hosts=[f"{A}:2"], min_np=1, max_np=2, private_shm=True),
    "grow_from_one": dict(np_=1, hosts=[f"{A}:1"], min_np=1, max_np=3),
}

FRAMEWORKS = ["torch", "tf"]
# Scenarios that differ from the others in what Horovod's elastic driver decides (a worker raising
# rather than killed, no replacement, every worker failing, the reset limit, too few hosts until
# the elastic timeout, a blacklisted host's cooldown) run with the torch worker only: what the
# workers do in them (a peer gone at a collective, restore the last commit, train on, send the
# state to newcomers) is what add_remove, kill_then_replace and kill_rank0 check under every
# framework. A TF launch costs about 5 s of CPU per rank start.
DRIVER_SCENARIO_FRAMEWORKS = ["torch"]
# model.fit with Horovod's elastic callbacks, in the scenario that changes the membership both ways
# through both of the callbacks' paths: a worker killed mid-step (HorovodInternalError, the last
# commit restored), then a replacement host added (HostsUpdatedInterrupt at a commit, the state
# broadcast to the newcomers). add_remove's host removal takes the same interrupt path; it runs
# under torch and TF2.
KERAS = ["keras3", "keras2"]
# TensorFlow in two scenarios whose worker paths another TF scenario of the default tier takes: the
# elastic_wide tier (tests/conftest.py) runs them. add_remove (a host joins, then rank 0's host is
# removed): the tf.function test below grows the job (the state broadcast to newcomers) and shrinks
# it (a worker removed at a commit), and kill_then_replace loses rank 0's host. kill_rank0: the
# survivors restore the last commit at a collective whose peer is gone, as in kill_then_replace;
# rank 0's loss itself is the engine's and the driver's, the same under torch. About 40 CPU-s each.
ELASTIC_WIDE = {("add_remove", "tf"), ("kill_rank0", "tf")}


def frameworks_of(scenario, frameworks):
    return [param_in_tier("elastic_wide", ELASTIC_WIDE, (scenario, f), f) for f in frameworks]


def hosts_of(rounds):
    """[(size, {hosts})...] of rounds, after checking each round's layout: ranks 0..size-1, two
    per host, contiguous per host (the driver's order of hosts varies from run to run)."""
    out = []
    for size, ranks in rounds:
        assert sorted(ranks) == list(range(size)), rounds
        order = [ranks[r] for r in range(size)]
        for i in range(0, size, 2):
            assert order[i] == order[i + 1], rounds
        assert len(set(order)) == size // 2, rounds
        out.append((size, set(order)))
    return out


@pytest.mark.parametrize("framework", frameworks_of("add_remove", FRAMEWORKS))
def test_hosts_added_then_removed(framework):
    o = outcome(framework, "add_remove")
    assert o.run.returncode == 0, o.output[-5000:]
    assert hosts_of(o.rounds()) == [(2, {A}), (4, {A, B}), (2, {B})], o.rounds()
    # The removed host's workers end with Horovod's message.
    assert f"{A}[0] has been removed from elastic job" in o.output
    history = o.check_weights()
    assert {size for _, size in history} == {2, 4}


@pytest.mark.parametrize("framework", DRIVER_SCENARIO_FRAMEWORKS)
def test_worker_raises_then_replacement_joins(framework):
    o = outcome(framework, "raise_then_replace")
    assert o.run.returncode == 0, o.output[-5000:]
    c = common.third_host()
    # B failed and was blacklisted (its other worker removed); A's two trained on; C joined.
    assert hosts_of(o.rounds()) == [(4, {A, B}), (2, {A}), (4, {A, c})], o.rounds()
    assert f"on {B} at step 6" in o.output and "injected failure of rank" in o.output
    o.check_weights()


@pytest.mark.parametrize("framework", DRIVER_SCENARIO_FRAMEWORKS)
def test_worker_killed_no_replacement(framework):
    o = outcome(framework, "kill_no_replacement")
    assert o.run.returncode == 0, o.output[-5000:]
    assert hosts_of(o.rounds()) == [(4, {A, B}), (2, {A})], o.rounds()
    fails = [e for e in o.events if e["event"] == "fail"]
    assert [(f["how"], f["host"]) for f in fails] == [("kill", B)]
    o.check_weights()


@pytest.mark.parametrize("framework", FRAMEWORKS + KERAS)
def test_worker_killed_then_replacement_joins(framework):
    o = outcome(framework, "kill_then_replace")
    assert o.run.returncode == 0, o.output[-5000:]
    c = common.third_host()
    # A is blacklisted: B's workers carry the state on.
    assert hosts_of(o.rounds()) == [(4, {A, B}), (2, {B}), (4, {B, c})], o.rounds()
    o.check_weights()


@pytest.mark.parametrize("framework", frameworks_of("kill_rank0", FRAMEWORKS))
def test_rank0_killed(framework):
    o = outcome(framework, "kill_rank0")
    assert o.run.returncode == 0, o.output[-5000:]
    [fail] = [e for e in o.events if e["event"] == "fail"]
    assert (fail["how"], fail["rank"]) == ("kill", 0)
    other = ({A, B} - {fail["host"]}).pop()
    assert hosts_of(o.rounds()) == [(4, {A, B}), (2, {other})], o.rounds()
    o.check_weights()


@pytest.mark.parametrize("framework", DRIVER_SCENARIO_FRAMEWORKS)
def test_every_worker_fails(framework):
    o = outcome(framework, "all_fail")
    assert o.run.returncode != 0
    assert "injected failure" in o.output
    assert "exited with non-zero status" in o.output, o.output[-3000:]
    assert o.final is None


@pytest.mark.parametrize("framework", DRIVER_SCENARIO_FRAMEWORKS)
def test_reset_limit_reached(framework):
    o = outcome(framework, "reset_limit")
    assert o.run.returncode != 0
    assert "number of resets during elastic job exceeded limit: 1" in o.output, o.output[-3000:]
    assert [size for size, _ in o.rounds()] == [2, 4], o.rounds()
    assert o.final is None


@pytest.mark.parametrize("framework", DRIVER_SCENARIO_FRAMEWORKS)
def test_fewer_hosts_than_min_np_until_timeout(framework):
    o = outcome(framework, "below_min_np")
    assert o.run.returncode != 0
    # The driver's own message (its "{activity}" placeholder is printed as is).
    assert "Timed out waiting for" in o.output, o.output[-3000:]
    assert "enough resources to run at least 4 Horovod processes. Timeout after 8 seconds" in o.output
    assert [size for size, _ in o.rounds()] == [4], o.rounds()
    assert o.final is None


@pytest.mark.parametrize("framework", DRIVER_SCENARIO_FRAMEWORKS)
def test_blacklisted_host_readmitted_after_cooldown(framework):
    o = outcome(framework, "blacklist_cooldown")
    assert o.run.returncode == 0, o.output[-5000:]
    assert hosts_of(o.rounds()) == [(4, {A, B}), (2, {A}), (4, {A, B})], o.rounds()
    o.check_weights()


def test_tf_function_traced_at_one_worker_keeps_training_as_the_job_grows_and_shrinks():
    """Horovod's test_elastic_tensorflow2 test_hosts_added_and_removed (slots=1): the first worker
    traces its tf.function step while alone. Traced with the size fixed at 1 it would never submit
    its gradients once others joined (the job died in the deadlock detector); the tape decides at
    run time (tf.cond on size_op, as Horovod under HOROVOD_ELASTIC=1), so the job grows to 3 and
    shrinks to 2, and the weights equal a float64 replay of the committed steps."""
    key = ("tf", "grow_from_one")
    if key not in _cache:
        _cache[key] = elastic_launch("tf", "grow_from_one", **LAUNCHES["grow_from_one"],
                                     env={"HERRING_TEST_TF_FUNCTION": "1"})
    o = _cache[key]
    assert o.run.returncode == 0, o.output[-5000:]
    assert [size for size, _ in o.rounds()] == [1, 3, 2], o.rounds()
    history = o.check_weights(two_slots_per_host=False)
    assert {size for _, size in history} == {1, 3, 2}, history
