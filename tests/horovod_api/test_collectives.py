"""Every collective and dtype of Horovod's torch API on the herring engine, run inside real
ranks launched by horovodrun (and mpirun), compared with references computed from every rank's
inputs. One launch runs every check; each check is reported as its own test."""

import os

import pytest

import checks
import launch

WORKER = os.path.join("tests", "horovod_api", "workers", "collectives_worker.py")
CHECK_NAMES = checks.names_in(WORKER)

# name -> (launcher, processes launched, extra environment). Dedicated servers are the last
# launched processes and report nothing: only workers run the checks.
CONFIGS = {
    "herring-np3": ("horovodrun", 3, {}),
    "ring-np3": ("horovodrun", 3, {"HERRING_ALLREDUCE": "ring"}),
    "herring-2hosts-np4": ("horovodrun", 4, {"HERRING_SIMULATED_HOSTS": "2"}),
    # 3 simulated hosts x 2 ranks with lazy connections (the default): every check's values
    # against its reference while each rank connects only to the peers it uses (issue 27).
    "herring-3hosts-np6": ("horovodrun", 6, {"HERRING_SIMULATED_HOSTS": "2", "HERRING_CONNECTIONS": "lazy"}),
    "herring-2hosts-2servers": ("horovodrun", 6, {"HERRING_SIMULATED_HOSTS": "2", "HERRING_DEDICATED_SERVERS": "2"}),
    "herring-2hosts-2servers-r2sp": ("horovodrun", 6, {"HERRING_SIMULATED_HOSTS": "2", "HERRING_DEDICATED_SERVERS": "2",
                                                       "HERRING_SCHEDULE": "r2sp"}),
    "herring-mpirun-np3": ("mpirun", 3, {}),
    "nocache-np3": ("horovodrun", 3, {"HOROVOD_CACHE_CAPACITY": "0"}),
}


def workers(name):
    launcher, np, extra = CONFIGS[name]
    return np - int(extra.get("HERRING_DEDICATED_SERVERS", 0))


def run_worker(launcher, np, extra):
    env = dict(extra, HOROVOD_DYNAMIC_PROCESS_SETS="1")
    fn = launch.horovodrun if launcher == "horovodrun" else launch.mpirun
    # With HERRING_SIMULATED_HOSTS ranks 0,1 report one host name, ranks 2,3 another...: shared-memory
    # groups joined by the parameter servers over TCP, on one machine.
    args = launch.on_simulated_hosts(env.pop("HERRING_SIMULATED_HOSTS", None), WORKER)
    return launch.run_with_results(fn, np, args, timeout=600, **env)


@pytest.fixture(scope="module", params=list(CONFIGS))
def launched(request):
    launcher, np, extra = CONFIGS[request.param]
    run, per_rank = run_worker(launcher, np, extra)
    return request.param, np, run, per_rank


test_every_rank_reported, test_check = checks.launch_tests(CHECK_NAMES, lambda name, np: range(workers(name)))


def test_engine_paths_used(launched):
    name, np, run, per_rank = launched
    counters = per_rank[0]["counters"]
    if name.startswith("ring"):
        assert counters["ring_allreduces"] > 0 and counters["herring_allreduces"] == 0, counters
    else:
        assert counters["herring_allreduces"] > 0, counters
    if "servers" in name:
        assert counters["server_pushes"] > 0 and counters["server_ranges"] == 0, counters  # shards elsewhere
    elif "hosts" in name:
        assert counters["server_ranges"] > 0, counters   # the cross-host PS path ran
    if name.startswith("nocache"):
        assert counters["cache_hits"] == 0, counters
