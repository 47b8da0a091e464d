"""The latency paths (HERRING_CONTROL_PLANE, HERRING_SMALL_MESSAGE_BYTES): the bit
vectors meet in shared memory, and small allreduces, broadcasts and allgathers take the one-step
path, with results equal to a reference, bitwise identical on every rank, and bitwise identical to
the staged pipeline and the TCP transfers under the TCP control plane; once cached, the smallest
travel with the bit vectors, with the same bits. Across simulated hosts, small
allreduces exchange host sums instead of going through the server shards, with the shards' bits;
once cached, the host sums ride the leaders' tree and the total comes with the result.
A lone request after a pause starts its cycle at once (counters)."""

import os

import pytest

import launch

WORKER = os.path.join("tests", "engine", "workers", "small_message_worker.py")
# A cycle time of a minute: the job (hundreds of synchronous collectives) ends within its launch
# timeout only if no cycle waits for the timer.
SLOW_TIMER = {"HOROVOD_CYCLE_TIME": "60000"}
# name: (ranks, simulated hosts, environment)
CONFIGS = {
    "shm-control-one-step": (3, 1, SLOW_TIMER),
    "tcp-control-staged": (3, 1, dict(SLOW_TIMER, HERRING_CONTROL_PLANE="tcp", HERRING_SMALL_MESSAGE_BYTES="0")),
    # Two simulated hosts of two ranks: small batches exchange host sums, or go through the shards.
    "hosts-exchange": (4, 2, SLOW_TIMER),
    "hosts-shards": (4, 2, dict(SLOW_TIMER, HERRING_SMALL_MESSAGE_BYTES="0")),
    # A rank alone on each host: its leader carries its own input as the host's sum.
    "hosts-alone": (2, 2, SLOW_TIMER),
}


@pytest.fixture(scope="module")
def runs():
    out = {}
    for name, (np, hosts, env) in CONFIGS.items():
        args = launch.on_simulated_hosts(np // hosts if hosts > 1 else None, WORKER)
        out[name] = launch.run_with_results(launch.horovodrun, np, args, prefix="herring-small-", timeout=300, **env)
    return out


@pytest.mark.parametrize("config", list(CONFIGS))
def test_results_equal_the_reference_on_every_rank(runs, config):
    run, per_rank = runs[config]
    np = CONFIGS[config][0]
    assert run.returncode == 0 and sorted(per_rank) == list(range(np)), run.output[-4000:]
    for r, data in per_rank.items():
        assert data["errors"] == [], f"{config} rank {r}: {data['errors'][:5]}"
        assert data["digests"] == per_rank[0]["digests"], f"{config}: rank {r}'s bits differ from rank 0's"


def test_host_sums_exchanged_across_hosts_give_the_bits_of_the_shards(runs):
    exchanged = runs["hosts-exchange"][1]
    sharded = runs["hosts-shards"][1]
    assert [k for k in exchanged[0]["digests"] if exchanged[0]["digests"][k] != sharded[0]["digests"][k]] == []
    for r in exchanged:
        # Small batches exchanged host sums (no push to a shard); larger ones went through the shards.
        assert exchanged[r]["counters"]["host_sum_exchanges"] > 0, (r, exchanged[r]["counters"])
        assert exchanged[r]["counters"]["server_pushes"] > 0, (r, exchanged[r]["counters"])
        assert sharded[r]["counters"]["host_sum_exchanges"] == 0, (r, sharded[r]["counters"])


def test_one_step_and_staged_paths_give_the_same_bits(runs):
    fast = runs["shm-control-one-step"][1][0]["digests"]
    staged = runs["tcp-control-staged"][1][0]["digests"]
    assert fast.keys() == staged.keys()
    assert [k for k in fast if fast[k] != staged[k]] == []


@pytest.mark.parametrize("config", list(CONFIGS))
def test_inputs_with_the_bit_vectors_give_the_same_bits(runs, config):
    # The second pass ran cached: on one host with the shared-memory control plane, the small
    # allreduces' inputs came with the bit vectors instead of through the one-step exchange.
    digests = runs[config][1][0]["digests"]
    again = {k[len("again:"):]: v for k, v in digests.items() if k.startswith("again:")}
    assert again and [k for k in again if again[k] != digests[k]] == []


def test_each_config_took_its_paths(runs):
    for r, data in runs["shm-control-one-step"][1].items():
        c = data["counters"]
        # Every cycle met in shared memory (the snapshots may straddle one cycle's two increments).
        assert c["cycles"] > 0 and abs(c["shm_negotiations"] - c["cycles"]) <= 1, (r, c)
        assert c["one_step_allreduces"] > 0 and c["shm_chunks"] > 0, (r, c)  # both paths ran
        assert c["one_step_broadcasts"] > 0 and c["one_step_allgathers"] > 0, (r, c)
        # The second pass's 1-, 7- and 1000-element allreduces (of 5 dtypes, 4-5 ops) fit beside
        # the bit vectors; the first pass's were not cached yet.
        assert 3 * 24 <= c["inputs_with_bits"] < c["one_step_allreduces"], (r, c)
    for r, data in runs["tcp-control-staged"][1].items():
        c = data["counters"]
        assert c["shm_negotiations"] == 0 and c["cycles"] > 0, (r, c)
        assert c["one_step_allreduces"] == c["one_step_broadcasts"] == c["one_step_allgathers"] == 0, (r, c)
        assert c["inputs_with_bits"] == 0, (r, c)
    for r, data in runs["hosts-exchange"][1].items():
        c = data["counters"]
        # Across hosts too, the second pass's inputs came with the host's bit vectors: its sum took
        # no hand-off of its own before the leaders exchanged the hosts' sums.
        assert 3 * 24 <= c["inputs_with_bits"] < c["host_sum_exchanges"], (r, c)
        # And the leaders carried the host sums up their tree: the total came with the result.
        assert 3 * 24 <= c["totals_with_bits"] <= c["inputs_with_bits"], (r, c)
    for r, data in runs["hosts-alone"][1].items():
        c = data["counters"]
        assert c["inputs_with_bits"] == 0 and 3 * 24 <= c["totals_with_bits"] < c["host_sum_exchanges"], (r, c)
    for r, data in runs["hosts-shards"][1].items():
        assert data["counters"]["inputs_with_bits"] == 0, (r, data["counters"])  # no one-step path at all
        assert data["counters"]["totals_with_bits"] == 0, (r, data["counters"])


@pytest.mark.parametrize("config", list(CONFIGS))
def test_a_lone_request_starts_its_cycle_at_once(runs, config):
    per_rank = runs[config][1]
    # Its cycle was started by a rank whose engine was idle (counted as such), not by a timer.
    assert sum(per_rank[r]["lone"]["idle_starts"] for r in per_rank) >= 1, {r: d["lone"] for r, d in per_rank.items()}


# HERRING_SMALL_MESSAGE_BYTES is 64 KiB; where some local rank has fewer cores than the host has
# ranks, a one-host allreduce takes one step up to 16 KiB only (native/ops/shm_staging.h), and is
# pipelined above, where reading the sum out of the others' tensors is no candidate route
# (native/ops/one_host_routes.h). np2-bind-rank1: rank 1 alone bound to one core, so the ranks' own
# counts differ and only the host's answer keeps them on one path (each asking its own, they summed
# garbage at 32 KiB) and local rank 0, whose vote picks the route, among the right candidates.
@pytest.mark.parametrize("np, bind_rank", [(3, None), (2, 1)], ids=["np3", "np2-bind-rank1"])
def test_one_step_stops_at_16_kib_where_ranks_outnumber_cores(np, bind_rank):
    env = {"HERRING_TEST_BIND_RANK": str(bind_rank)} if bind_rank is not None else {}
    run, per_rank = launch.run_with_results(launch.horovodrun, np, [os.path.join("tests", "engine", "workers",
                                                                                 "one_step_limit_worker.py")],
                                            prefix="herring-one-step-limit-", timeout=200, **env)
    assert run.returncode == 0 and sorted(per_rank) == list(range(np)), run.output[-4000:]
    without_a_core = any(d["cpus"] < d["local_size"] for d in per_rank.values())
    assert without_a_core or bind_rank is None, per_rank
    for r, data in per_rank.items():
        small, mid, large = (data["sizes"][str(n)] for n in (8 << 10, 32 << 10, 8 << 20))
        assert small["one_step_allreduces"] >= 20 and small["shm_chunks"] == 0, (r, data)
        if without_a_core:
            assert mid["one_step_allreduces"] == 0 and mid["shm_chunks"] >= 20, (r, data)
            # Its first runs try each candidate: staging, then the cross-memory allreduce.
            assert large["peer_output_reads"] == 0 and large["cross_memory_allreduces"] > 0, (r, data)
        else:
            assert mid["one_step_allreduces"] >= 20 and mid["shm_chunks"] == 0, (r, data)
