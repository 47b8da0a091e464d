"""Lazy connections (HERRING_CONNECTIONS, issue 27): ranks on simulated hosts (HERRING_HOSTNAME
per pair of ranks, launched by the real horovodrun) run allreduces on the PS path and the
host-sums path (values checked against references in the worker), and the transport's socket
counters show that a rank connects only to the peers it uses: the same local rank on the other
hosts (its server shards' ranks) and the control plane's rank 0, against every other rank under
HERRING_CONNECTIONS=mesh. A rank killed mid-collective still fails every survivor with an error
naming it. About 60-90 s on 2 busy cores."""

import json
import os
import shutil

import pytest

import launch

WORKER = os.path.join("tests", "reliability", "workers", "connections_worker.py")
AS_HOST = launch.AS_SIMULATED_HOST
STREAMS = 2  # HERRING_TCP_STREAMS' default: a connected pair holds 1 control + 2 data sockets


def run_job(np, per_host, timeout=300, **env):
    out = launch.scratch_dir("herring-connections-")
    try:
        run = launch.horovodrun(np, [AS_HOST, str(per_host), WORKER], timeout=timeout, CONN_RESULTS=out,
                                HERRING_TCP_STREAMS=STREAMS, **env)
        results = {}
        for name in os.listdir(out):
            with open(os.path.join(out, name)) as f:
                r = json.load(f)
            results[r["rank"]] = r
        return run, results
    finally:
        shutil.rmtree(out, ignore_errors=True)


def data_peers(rank, np, per_host):
    """The ranks holding this rank's server shards: its local index on every other host."""
    local = rank % per_host
    return {h * per_host + local for h in range(np // per_host)} - {rank}


def control_peers(rank, np, per_host):
    """The hierarchical control plane's TCP peers (engine/control_tree.h): a non-leader talks only
    to its host's leader (the coordinator's rounds); a leader to its host's other ranks and to its
    parent and children in the leaders' binomial tree rooted at rank 0."""
    leader = rank - rank % per_host
    if rank != leader:
        return {leader}
    i, n = rank // per_host, np // per_host
    span = 1 << (n - 1).bit_length() if i == 0 else i & -i
    tree = {i - span} if i else set()
    k = span >> 1
    while k >= 1:
        if i + k < n:
            tree.add(i + k)
        k >>= 1
    return set(range(leader + 1, leader + per_host)) | {h * per_host for h in tree}


@pytest.mark.parametrize("mode", ["lazy", "mesh"])
def test_sockets_follow_what_the_algorithms_use(mode):
    np, per_host = 8, 2  # 4 simulated hosts x 2 ranks
    run, results = run_job(np, per_host, HERRING_CONNECTIONS=mode)
    assert run.returncode == 0, run.output[-6000:]
    assert sorted(results) == list(range(np)), run.output[-4000:]
    for rank, r in sorted(results.items()):
        assert r["ok"], f"rank {rank}: {r.get('error')}"
        c = r["counters"]
        assert c["herring_allreduces"] > 0 and c["server_ranges"] > 0, c  # the cross-host PS path ran
        assert c["host_sum_exchanges"] > 0, c                             # and the host-sums path
        assert c["open_sockets"] == c["connected_peers"] * (STREAMS + 1), c
        if mode == "mesh":
            assert c["connected_peers"] == np - 1, f"rank {rank}: {c['connected_peers']} peers in the full mesh"
            continue
        assert r["after_init"]["open_sockets"] <= (STREAMS + 1) * (np - 1), r["after_init"]
        # Data peers, plus the control plane's: a rank's leader, or a leader's host and tree.
        allowed = data_peers(rank, np, per_host) | control_peers(rank, np, per_host)
        assert c["connected_peers"] <= len(allowed), \
            f"rank {rank}: {c['connected_peers']} peers, at most {sorted(allowed)} expected"
        if rank != 0:
            assert c["connected_peers"] < np - 1, f"rank {rank} connected to everyone"
    init = sorted(r["init_seconds"] for r in results.values())
    print(f"{mode}: init {init[0]:.3f}-{init[-1]:.3f} s, peers per rank "
          f"{[results[r]['counters']['connected_peers'] for r in range(np)]}")


def test_rank_killed_mid_collective_fails_the_survivors_naming_it():
    np, per_host, victim = 6, 2, 3  # 3 simulated hosts x 2 ranks
    run, results = run_job(np, per_host, timeout=240, CONN_KILL=victim, HERRING_TIMEOUT_SECONDS=20)
    assert run.returncode != 0, "the job succeeded with a rank killed"
    survivors = [r for r in range(np) if r != victim]
    assert sorted(results) == survivors, f"reports from {sorted(results)}\n{run.output[-6000:]}"
    for rank in survivors:
        r = results[rank]
        assert not r["ok"], f"rank {rank} finished its allreduces with rank {victim} dead"
        assert f"rank {victim}" in r["error"], f"rank {rank}: {r['error']}"
