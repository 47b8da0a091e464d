"""One-host allreduces that reach the other ranks' tensors in their processes
(HERRING_READ_PEER_TENSORS): the cross-memory allreduce (`always`, native/ops/cross_memory_allreduce.h)
and the all-gather out of the others' outputs (`outputs`, native/ops/peer_output_reads.h). Every
check inside real ranks launched by horovodrun, against references from every rank's inputs; the
same results bit for bit as through the shared result area; which route ran, from the counters.
Faults during them are in test_reliability.py."""

import os

import pytest

import checks
import launch

WORKER = os.path.join("tests", "ops", "workers", "peer_reads_worker.py")
CHECK_NAMES = checks.names_in(WORKER)
# name -> (ranks, ranks per simulated host or 0 for one host, HERRING_READ_PEER_TENSORS)
CONFIGS = {
    "np2-auto": (2, 0, "auto"),
    "np3-always": (3, 0, "always"),
    "np3-outputs": (3, 0, "outputs"),
    "np3-never": (3, 0, "never"),
    "np4-always": (4, 0, "always"),  # on 2 cores: the units go to the ranks that hold one
    "2hosts-np4-always": (4, 2, "always"),
}
ROUTE_COUNTERS = {"outputs": "peer_output_reads", "always": "cross_memory_allreduces"}


def routes_expected(name, data):
    """The counters of the routes this launch must have taken, and whether the others must stay at 0."""
    _, per_host, setting = CONFIGS[name]
    if per_host or setting == "never":
        return set(), True  # across hosts the result area also takes the servers' sums
    if setting == "auto":
        # Its first runs try every candidate route; with a core per rank that is all of them (with
        # more ranks than cores, the cross-memory route from 4 MiB batches only).
        return (set(ROUTE_COUNTERS.values()) if data["local_size"] <= data["cpus"] else set()), False
    return {ROUTE_COUNTERS[setting]}, True


@pytest.fixture(scope="module")
def launches():
    done = {}

    def get(name):
        if name not in done:
            np, per_host, setting = CONFIGS[name]
            args = launch.on_simulated_hosts(per_host, WORKER)
            done[name] = (np, *launch.run_with_results(launch.horovodrun, np, args, prefix="herring-peer-reads-",
                                                       timeout=400, HERRING_READ_PEER_TENSORS=setting))
        return done[name]
    return get


@pytest.mark.parametrize("name", list(CONFIGS))
def test_every_check_passes_on_every_rank(launches, name):
    np, run, per_rank = launches(name)
    assert sorted(per_rank) == list(range(np)), f"{name}: ranks reported {sorted(per_rank)}\n{run.output[-4000:]}"
    for r, data in sorted(per_rank.items()):
        failed = checks.failed_checks(CHECK_NAMES, data)
        assert not failed, f"{name}: rank {r}: {failed}"
    assert run.returncode == 0, f"{name}: exit status {run.returncode}\n{run.output[-6000:]}"


@pytest.mark.parametrize("name", list(CONFIGS))
def test_the_expected_route_ran(launches, name):
    np, run, per_rank = launches(name)
    for r, data in sorted(per_rank.items()):
        expected, only = routes_expected(name, data)
        for counter in ROUTE_COUNTERS.values():
            n = data["counters"][counter]
            if counter in expected:
                assert n > 0, f"{name}: rank {r}: {counter} is 0"
            elif only:
                assert n == 0, f"{name}: rank {r}: {counter} is {n}, expected 0"


@pytest.mark.parametrize("route", ["np3-always", "np3-outputs"])
def test_same_bits_as_through_the_result_area(launches, route):
    _, _, direct = launches(route)
    _, _, staged = launches("np3-never")
    for r in range(3):
        assert direct[r]["digests"] and direct[r]["digests"] == staged[r]["digests"], \
            f"rank {r}: results differ between {route} and the result area\n{direct[r]['digests']}\n{staged[r]['digests']}"
