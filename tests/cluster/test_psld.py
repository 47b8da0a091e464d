"""PSLD (HERRING_BALANCER=psld) and the R2SP push schedule (HERRING_SCHEDULE=r2sp): with one dedicated server made slow, rank 0's balancer moves
byte ranges to the fast server, every rank switches maps at the same step, and training gives
bitwise the same weights as with static shares (a range's sum does not depend on which server
computes it: servers always add the hosts' contributions in host order)."""

import json
import os

import pytest

import launch

WORKER = os.path.join("tests", "cluster", "workers", "psld_worker.py")


def train(balancer, schedule="all"):
    results = launch.scratch_dir("herring-psld-")
    # Workers 0-3 on simulated hosts 0 and 1, dedicated servers 4 and 5 on host 2; server 5 slow.
    run = launch.horovodrun(6, [launch.AS_SIMULATED_HOST, "2", WORKER],
                            timeout=300, HERRING_TEST_RESULTS=results, HERRING_DEDICATED_SERVERS=2,
                            HERRING_BALANCER=balancer, HERRING_SLOWDOWN="5:40000", HERRING_BALANCE_INTERVAL=4,
                            HERRING_SCHEDULE=schedule)
    assert run.returncode == 0, run.output[-4000:]
    out = {}
    for r in range(4):
        with open(os.path.join(results, f"{r}.json")) as f:
            out[r] = json.load(f)
    return out


@pytest.fixture(scope="module")
def runs():
    return {"psld": train("psld"), "none": train("none"), "r2sp": train("none", "r2sp")}


def test_balancer_moves_load_off_the_slow_server(runs):
    for rank, res in runs["psld"].items():
        layout = res["layout"]
        assert layout["shard_ranks"] == [4, 5] and layout["dedicated"]
        assert layout["version"] > 0, layout
        slow_share = layout["shares"][1]
        assert slow_share < 0.3, (rank, layout)


def test_every_rank_has_the_same_map_for_each_version(runs):
    # Ranks sample the layout at slightly different moments, but a version means the same shares
    # everywhere (the map is decided once, on rank 0, and handed out through the negotiation).
    seen = {}
    for rank, res in runs["psld"].items():
        for version, shares in res["shares"]:
            assert seen.setdefault(version, shares) == shares, (rank, version, shares, seen[version])
    assert len(seen) > 1


def test_static_shares_stay_equal(runs):
    for res in runs["none"].values():
        assert res["layout"]["version"] == 0 and res["layout"]["shares"] == [0.5, 0.5]


def test_training_results_identical_with_and_without_balancing_and_r2sp(runs):
    # The R2SP push schedule changes when pieces travel, never what the servers add up.
    digests = {res["digest"] for run in runs.values() for res in run.values()}
    assert len(digests) == 1, digests
