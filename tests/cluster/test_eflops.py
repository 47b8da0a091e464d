"""EFLOPS: the halving-doubling allreduce (HERRING_ALLREDUCE=hd) and its topology-aware rank
mapping (hd-topo with HERRING_TOPOLOGY), in real ranks launched by horovodrun.

- Correctness at np = 2..6 (non-powers of two fold ranks in), every dtype and op, fused batches,
  buffers cut into many pieces, bitwise identity across ranks and repeats (tests/cluster/workers/
  eflops_worker.py); the engine counters prove neither the herring nor the ring path ran.
- hd-topo ranks report simulated host names; the topology groups those hosts, and the mapping the
  engine logged must put every exchange on a link of its own.
- Bad topologies fail with messages naming the file or the host.
- In the simulated cluster (network namespaces, shaped links, horovodrun over ssh), hd-topo's
  payload travels over the direct cross-group links only, while rank-order hd sends its halves
  over the group's shared link: measured on the hosts' interfaces.
The mapping logic itself is unit-tested natively (native/tests/eflops_test.cc)."""

import json
import os
import re
import sys

import pytest

import checks
import launch

WORKER = os.path.join("tests", "cluster", "workers", "eflops_worker.py")
CHECK_NAMES = checks.names_in(WORKER)

# name -> (np, algorithm, ranks per simulated host or None for one host)
CONFIGS = {
    "hd-np2": (2, "hd", None),
    "hd-np3": (3, "hd", None),
    "hd-np4": (4, "hd", None),
    "hd-np5": (5, "hd", None),
    "hd-np6": (6, "hd", None),
    "hd-topo-np2": (2, "hd-topo", 1),
    "hd-topo-np3": (3, "hd-topo", 1),
    "hd-topo-np4-2perhost": (4, "hd-topo", 2),
    "hd-topo-np5": (5, "hd-topo", 1),
    "hd-topo-np6": (6, "hd-topo", 1),
}

SHARED_INTRA = {"link": "shared", "rate": "500mbit"}
DIRECT_CROSS = {"link": "direct", "rate": "1gbit"}


def two_group_topology(hosts):
    """simhost0..: the first half (rounded up) in group a, the rest in b; traffic inside a group
    shares one link, pairs across groups have direct links (BiGraph)."""
    first = (hosts + 1) // 2
    return {"rate": "1gbit",
            "hosts": [{"name": f"simhost{i}", "slots": 1, "group": "a" if i < first else "b"} for i in range(hosts)],
            "intra": SHARED_INTRA, "cross": DIRECT_CROSS}


def write_json(directory, name, data):
    path = os.path.join(directory, name)
    with open(path, "w") as f:
        json.dump(data, f)
    return path


def run_worker(np, algorithm, per_host, extra=None):
    env = dict(HERRING_ALLREDUCE=algorithm, HOROVOD_LOG_LEVEL="INFO")
    args = launch.on_simulated_hosts(per_host, WORKER)
    if per_host and algorithm == "hd-topo":
        env["HERRING_TOPOLOGY"] = write_json(launch.scratch_dir("herring-eflops-topology-"), "topology.json",
                                             two_group_topology(-(-np // per_host)))
    env.update(extra or {})
    return launch.run_with_results(launch.horovodrun, np, args, prefix="herring-eflops-", timeout=600, **env)


@pytest.fixture(scope="module", params=list(CONFIGS))
def launched(request):
    np, algorithm, per_host = CONFIGS[request.param]
    run, per_rank = run_worker(np, algorithm, per_host)
    return request.param, np, run, per_rank


test_every_rank_reported, test_check = checks.launch_tests(CHECK_NAMES)


def test_halving_doubling_ran(launched):
    """Neither of the other TCP paths ran: every fused buffer went through halving-doubling."""
    name, np, run, per_rank = launched
    assert per_rank, f"{name}: no rank reported\n{run.output[-4000:]}"
    for r, data in per_rank.items():
        c = data["counters"]
        assert c["fused_buffers"] > 50, (name, r, c)
        assert c["herring_allreduces"] == 0 and c["ring_allreduces"] == 0, (name, r, c)


MAPPING_LINE = re.compile(r"hd-topo, process set (\d+): (\S+(?: \S+)?) mapping(?: \(\+\d+ swaps\))? of (\d+) members.*"
                          r"most flows on one link per step: ([\d ]+);")


def test_topology_mapping_logged_and_uncontended(launched):
    name, np, run, per_rank = launched
    if not name.startswith("hd-topo"):
        # Rank order: no topology mapping may be computed or logged.
        assert not MAPPING_LINE.search(run.output), f"{name}: a topology mapping was logged\n{run.output[-3000:]}"
        return
    found = {}
    for m in MAPPING_LINE.finditer(run.output):
        found.setdefault((int(m.group(1)), int(m.group(3))), set()).add((m.group(2), m.group(4).strip()))
    assert (0, np) in found, f"{name}: no mapping of the global set was logged\n{run.output[-3000:]}"
    # Every rank computed the same mapping.
    assert len(found[(0, np)]) == 1, f"{name}: ranks logged different mappings: {found[(0, np)]}"
    (strategy, flows), = found[(0, np)]
    assert strategy in ("bigraph", "group-contiguous", "rank order"), strategy
    counts = [int(x) for x in flows.split()]
    if CONFIGS[name][2] == 1:
        # One rank per host: no link carries two flows in any step.
        assert counts and all(c == 1 for c in counts), f"{name}: {strategy} mapping, flows per link {counts}"


def test_hd_topo_fails_at_init_naming_a_missing_file():
    run, per_rank = run_worker(2, "hd-topo", 1, {"HERRING_TOPOLOGY": "/nonexistent/eflops-topology.json"})
    assert run.returncode != 0 and not per_rank
    assert "cannot read /nonexistent/eflops-topology.json" in run.output, run.output[-3000:]


def test_hd_topo_names_a_host_the_topology_lacks():
    results = launch.scratch_dir("herring-eflops-topo-")
    only_host0 = write_json(results, "t.json", {"groups": {"a": ["simhost0"], "b": ["elsewhere"]}})
    run, per_rank = run_worker(2, "hd-topo", 1, {"HERRING_TOPOLOGY": only_host0})
    assert run.returncode != 0
    assert "does not name host 'simhost1' of rank 1" in run.output, run.output[-3000:]
    # Both ranks failed the collective with that message (none hung until a timeout).
    for r, data in per_rank.items():
        assert "does not name host 'simhost1'" in data["results"]["allreduce_every_dtype_and_op"], data


# --- the simulated cluster: where the bytes go ------------------------------------------------

TRAFFIC_WORKER = os.path.join("tests", "cluster", "workers", "eflops_traffic_worker.py")


@pytest.fixture(scope="module")
def bigraph_cluster():
    from tools.simcluster.cluster import SimulatedCluster, check_environment
    from tools.simcluster.cluster_spec import ClusterSpec
    from tools.simcluster.processes import ClusterError
    try:
        check_environment()
    except ClusterError as e:
        pytest.skip(str(e))
    spec = ClusterSpec.from_dict({"rate": "1gbit", "hosts": [{"slots": 1, "group": g} for g in "aabb"],
                                  "intra": {"link": "shared", "rate": "300mbit"},
                                  "cross": {"link": "direct", "rate": "1gbit"}})
    with SimulatedCluster(spec=spec) as c:
        yield c


def direct_and_shared_bytes(cluster):
    """Per host: bytes sent on its direct links (d<j>) and on eth0 (its port, which carries the
    intra-group traffic through the group's shared link)."""
    out = {}
    for i, name in enumerate(cluster.host_names):
        direct = 0
        for j in range(len(cluster.host_names)):
            if j != i and not cluster.spec.same_group(i, j):
                direct += cluster.interface_bytes(name, f"d{j}")[1]
        out[name] = (direct, cluster.interface_bytes(name, "eth0")[1])
    return out


@pytest.mark.parametrize("algorithm", ["hd-topo", "hd"])
def test_bytes_follow_the_mapping_in_the_simulated_cluster(bigraph_cluster, algorithm):
    c = bigraph_cluster
    results = launch.scratch_dir("herring-eflops-cluster-")
    topo = write_json(results, "cluster.json", c.spec.to_dict())
    size, reps = 8 << 20, 4
    before = direct_and_shared_bytes(c)
    run = c.horovodrun([sys.executable, os.path.join(launch.ROOT, TRAFFIC_WORKER), str(size), str(reps)],
                       env={"HOROVOD_BACKEND": "herring", "HERRING_ALLREDUCE": algorithm, "HERRING_TOPOLOGY": topo,
                            "PYTHONPATH": os.pathsep.join(filter(None, launch.import_path() + [os.environ.get("PYTHONPATH")]))},
                       cwd=launch.ROOT, timeout=300)
    assert run.returncode == 0, run.output[-4000:]
    after = direct_and_shared_bytes(c)
    # Each rank sends 2 * (1/2 + 1/4) of the buffer per allreduce (4 ranks: two rounds each way).
    payload = size * 1.5 * reps
    for host in c.host_names:
        direct = after[host][0] - before[host][0]
        shared = after[host][1] - before[host][1]
        if algorithm == "hd-topo":
            # Everything over the host's own direct links; eth0 only carries control traffic
            # (negotiation, rendezvous, ssh).
            assert direct >= payload, (host, direct, shared, payload)
            assert shared < 0.05 * payload, (host, direct, shared, payload)
        else:
            # Rank order: the round at distance 1 (half the buffer, each way) pairs the two hosts
            # of a group, so it goes through the group's shared link.
            assert shared >= size * 1.0 * reps, (host, direct, shared, payload)
