"""An unchanged Horovod training script on the herring engine gives what a single process
trained on every rank's data gives, with identical weights on every rank; in steady state the
negotiation needs no coordinator round (one bit-vector AND per cycle)."""

import os

import pytest

import launch

pytestmark = pytest.mark.fast  # the fast tier (tests/conftest.py)

WORKER = os.path.join("tests", "horovod_api", "workers", "training_worker.py")


def run(np, **env):
    r, per_rank = launch.run_with_results(launch.horovodrun, np, [WORKER], prefix="herring-train-", timeout=600, **env)
    assert r.returncode == 0, r.output[-6000:]
    return {rank: per_rank[rank]["results"] for rank in range(np)}


@pytest.fixture(scope="module", params=[2, 3, 4])
def trained(request):
    return request.param, run(request.param)


@pytest.mark.parametrize("variant", ["default", "num_groups", "groups"])
def test_matches_single_process_reference(trained, variant):
    np, results = trained
    for rank, res in results.items():
        assert res[variant]["max_diff"] < 2e-5, f"np={np} rank {rank} {variant}: {res[variant]['max_diff']}"


@pytest.mark.parametrize("variant", ["default", "num_groups", "groups"])
def test_weights_identical_on_every_rank(trained, variant):
    np, results = trained
    assert all(res[variant]["identical"] for res in results.values())


def test_steady_state_steps_use_no_coordinator_round(trained):
    np, results = trained
    for rank, res in results.items():
        c = res["default"]["counters"]
        early, late = c["after_step_2"], c["after_last_step"]
        assert late["cycles"] > early["cycles"], (early, late)
        assert late["coordinator_rounds"] == early["coordinator_rounds"], (rank, early, late)
        assert late["cache_hits"] > early["cache_hits"]


def test_without_cache_every_cycle_is_a_coordinator_round():
    results = run(2, HOROVOD_CACHE_CAPACITY="0")
    for rank, res in results.items():
        c = res["default"]["counters"]
        early, late = c["after_step_2"], c["after_last_step"]
        cycles = late["cycles"] - early["cycles"]
        rounds = late["coordinator_rounds"] - early["coordinator_rounds"]
        assert cycles > 0 and rounds == cycles, (rank, early, late)
        assert late["cache_hits"] == 0
        assert res["default"]["max_diff"] < 2e-5
