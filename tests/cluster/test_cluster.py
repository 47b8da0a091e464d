"""The simulated cluster (tools.simcluster.cluster): hosts as network namespaces joined by
shaped links, an sshd per host, jobs launched with the real horovodrun over ssh. Runs the
collectives worker with HOROVOD_BACKEND=herring on 2 hosts x 2 ranks (every check as its own
test) and on 4 hosts x 2 ranks, checks that ranks really ran on their own hosts and that the
cross-host path carried the data, measures the shaped links, and checks that nothing is left
behind after a normal run, a failing command, an exception and a killed harness."""

import glob
import hashlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

import checks
import launch
from simulated_cluster import needs_cluster
from tools.simcluster import cluster, cluster_spec, link_bound, processes

SimulatedCluster = cluster.SimulatedCluster
# Exclusive: it compares the machine's namespaces, links, mounts and sshd processes before and after
# (machine_state), which a neighbouring file's simulated cluster would change meanwhile.
pytestmark = pytest.mark.exclusive

WORKER = os.path.join(launch.ROOT, "tests", "horovod_api", "workers", "collectives_worker.py")
CHECK_NAMES = checks.names_in(WORKER)
RECORD_HOST = os.path.join(launch.ROOT, "tests", "harness", "record_host.py")
LARGE_ALLREDUCE_BYTES = (5 * 1024 * 1024 + 3) * 4      # allreduce_large_tensor_through_chunks


def _sh(cmd):
    return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=30).stdout


def machine_state():
    """What the harness must leave as it found: the machine's own namespaces, links, mounts,
    sshd processes, files it could have touched."""
    home_ssh = os.path.join(pwd.getpwuid(os.getuid()).pw_dir, ".ssh")
    with open("/etc/hosts", "rb") as f:
        hosts_sha = hashlib.sha256(f.read()).hexdigest()
    with open("/proc/self/mountinfo") as f:
        mounts = sorted(line.split(" - ")[0].split(" ", 4)[4] for line in f)
    return {
        "ip netns list": _sh("ip netns list"),
        "ip link": sorted(line.split(":")[1].strip() for line in _sh("ip -o link").splitlines()),
        "sshd processes": sorted(_sh("pgrep -a sshd").splitlines()),
        "~/.ssh": sorted(os.listdir(home_ssh)) if os.path.isdir(home_ssh) else "absent",
        "/run/sshd": os.path.exists("/run/sshd"),
        "/etc/hosts": hosts_sha,
        "mounts": mounts,
    }


def assert_nothing_left(before, inodes, workdir):
    """No process in the cluster's namespaces or tagged by this test process, no temp dir, and
    the machine as it was."""
    deadline = time.monotonic() + 10
    while processes.processes_holding_netns(inodes) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not processes.processes_holding_netns(inodes), "processes still hold the cluster's namespaces"
    tag = f"{processes.OWNER_ENV}={os.getpid()}:".encode()
    mine = [pid for pid in processes.find_leftovers(include_live=True)[0] if tag in processes.environ_of(pid)]
    assert not mine, f"processes of this harness survived: {mine}"
    assert not os.path.exists(workdir), f"{workdir} was not removed"
    assert not glob.glob(os.path.join(tempfile.gettempdir(), f"{processes.WORKDIR_PREFIX}{os.getpid()}-*"))
    after = machine_state()
    for key in before:
        assert after[key] == before[key], f"{key} changed:\nbefore {before[key]}\nafter  {after[key]}"


def read_results(results_dir, np):
    per_rank, hosts = {}, {}
    for r in range(np):
        for prefix, into in (("", per_rank), ("host-", hosts)):
            path = os.path.join(results_dir, f"{prefix}{r}.json")
            if os.path.exists(path):
                with open(path) as f:
                    into[r] = json.load(f)
    return per_rank, hosts


def run_collectives(c, only=None, timeout=600):
    results_dir = tempfile.mkdtemp(prefix="herring-results-")
    env = launch.herring_env(HERRING_TEST_RESULTS=results_dir, HOROVOD_DYNAMIC_PROCESS_SETS="1",
                             HERRING_TEST_ONLY=",".join(only) if only else None)
    try:
        run = c.horovodrun([sys.executable, RECORD_HOST, WORKER], env=env, cwd=launch.ROOT, timeout=timeout)
        np = sum(h.slots for h in c.spec.hosts if h.role == "worker")
        return run, *read_results(results_dir, np)
    finally:
        shutil.rmtree(results_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def job_2x2():
    before = machine_state()
    with SimulatedCluster(hosts=2, slots=2, rate="1gbit") as c:
        inodes, workdir = c.netns_inodes, c.workdir
        bytes_before = [c.interface_bytes(h) for h in range(2)]
        run, per_rank, hosts = run_collectives(c)
        bytes_after = [c.interface_bytes(h) for h in range(2)]
        addresses = [c.address(h) for h in range(2)]
    moved = [(a[0] - b[0], a[1] - b[1]) for a, b in zip(bytes_after, bytes_before)]
    return dict(run=run, per_rank=per_rank, hosts=hosts, moved=moved, addresses=addresses,
                before=before, inodes=inodes, workdir=workdir, setup=c.setup_seconds)


@needs_cluster
def test_2x2_every_rank_reported_from_its_own_host(job_2x2):
    run, per_rank, hosts = job_2x2["run"], job_2x2["per_rank"], job_2x2["hosts"]
    assert sorted(per_rank) == [0, 1, 2, 3], f"ranks reported {sorted(per_rank)}\n{run.output[-6000:]}"
    assert run.returncode == 0, f"horovodrun exit status {run.returncode}\n{run.output[-6000:]}"
    own_netns = os.stat("/proc/self/ns/net").st_ino
    for r, rec in hosts.items():
        host = r // 2
        assert rec["gethostname"] == f"simhost{host}", (r, rec)
        assert rec["horovod_hostname"] == f"simhost{host}", (r, rec)
        assert rec["backend"] == "herring" and rec["python"] == sys.executable, (r, rec)
        assert rec["gloo_iface"] == "eth0", (r, rec)
        assert rec["netns_inode"] != own_netns, f"rank {r} ran in the test's own network namespace"
    assert hosts[0]["netns_inode"] == hosts[1]["netns_inode"] != hosts[2]["netns_inode"] == hosts[3]["netns_inode"]
    # Ranks of simhost1 were started by its sshd, connected from simhost0; simhost0's locally.
    for r in (2, 3):
        client, _, server, port = hosts[r]["ssh_connection"].split()
        assert (client, server, port) == (job_2x2["addresses"][0], job_2x2["addresses"][1], "22"), hosts[r]
    assert hosts[0]["ssh_connection"] is None and hosts[1]["ssh_connection"] is None


@needs_cluster
@pytest.mark.parametrize("check", CHECK_NAMES)
def test_2x2_check(job_2x2, check):
    for r, data in sorted(job_2x2["per_rank"].items()):
        assert data["results"].get(check) == "ok", f"rank {r}: {data['results'].get(check, 'did not run')}"


@needs_cluster
def test_2x2_cross_host_path_carried_the_data(job_2x2):
    counters = job_2x2["per_rank"][0]["counters"]
    assert counters["herring_allreduces"] > 0 and counters["server_ranges"] > 0, counters
    # The large allreduce alone sends half of each host's buffer to the other host's server
    # shards and gets half of the sums back, through each host's shaped eth0.
    for host, (received, sent) in enumerate(job_2x2["moved"]):
        assert received >= LARGE_ALLREDUCE_BYTES // 2 and sent >= LARGE_ALLREDUCE_BYTES // 2, \
            f"simhost{host}: eth0 received {received} and sent {sent} bytes during the job"


@needs_cluster
def test_2x2_left_nothing_behind(job_2x2):
    assert_nothing_left(job_2x2["before"], job_2x2["inodes"], job_2x2["workdir"])


@needs_cluster
def test_4_hosts_x_2_ranks_over_ssh():
    before = machine_state()
    only = ["allreduce_every_dtype_and_op", "allreduce_results_bitwise_identical_on_every_rank",
            "allreduce_large_tensor_through_chunks", "grouped_allreduce_variants",
            "allgather_first_dimension_differs_per_rank", "broadcast_from_every_root_and_dtype",
            "alltoall_with_and_without_splits", "barrier_and_join"]
    with SimulatedCluster(hosts=4, slots=2, rate="1gbit") as c:
        inodes, workdir = c.netns_inodes, c.workdir
        run, per_rank, hosts = run_collectives(c, only=only)
    assert run.returncode == 0 and sorted(per_rank) == list(range(8)), \
        f"exit status {run.returncode}, ranks reported {sorted(per_rank)}\n{run.output[-6000:]}"
    assert sorted({rec["gethostname"] for rec in hosts.values()}) == [f"simhost{h}" for h in range(4)]
    assert len({rec["netns_inode"] for rec in hosts.values()}) == 4
    for r, data in sorted(per_rank.items()):
        assert sorted(data["results"]) == sorted(only), f"rank {r} ran {sorted(data['results'])}"
        for check, result in data["results"].items():
            assert result == "ok", f"rank {r}: {check}: {result}"
    assert per_rank[0]["counters"]["server_ranges"] > 0, per_rank[0]["counters"]
    assert_nothing_left(before, inodes, workdir)


def elastic_over_ssh(c, scenario, hosts, np_, min_np, max_np):
    """An elastic horovodrun job of the torch elastic worker (tests/elastic/workers/elastic_common.py's
    scenario) inside the cluster: the driver on host 0 reads a discovery script naming simulated
    hosts and starts their workers over ssh. Returns the outcome, {"A": host, ...} and the
    round-layout checker of test_elastic_workers."""
    import test_elastic_workers as elastic
    results = launch.scratch_dir(f"herring-elastic-ssh-{scenario}-")
    # A and B are hosts other than the driver's: an elastic driver whose hosts are all its own
    # looks for the interface of 127.0.0.1 among --network-interfaces (Horovod's rule), not eth0.
    # C, the replacement host, is the driver's (its worker starts without ssh).
    names = dict(zip("ABC", c.host_names[1:] + c.host_names[:1]))
    hosts_file, discover = elastic.common.write_discovery(
        results, [h.format(**{f"HOST_{k}": v for k, v in names.items()}) for h in hosts])
    env = launch.herring_env(HERRING_TEST_RESULTS=results, HERRING_TEST_SCENARIO=scenario,
                             HERRING_TEST_HOSTS_FILE=hosts_file, HOROVOD_DYNAMIC_PROCESS_SETS=1,
                             **{f"HERRING_TEST_HOST_{k}": v for k, v in names.items()},
                             PYTHONPATH=os.pathsep.join(launch.import_path()))
    run = c.horovodrun([sys.executable, elastic.WORKERS["torch"]], np=np_, env=env, cwd=launch.ROOT,
                       timeout=elastic.TIMEOUT, discovery_script=discover,
                       extra_args=["--min-np", str(min_np), "--max-np", str(max_np)])
    outcome = elastic.Outcome(run, results, scenario)
    for e in outcome.events:
        if e["event"] == "round":   # each worker ran in the namespace of the host it was placed on
            assert e["node"] == e["host"], e
    return outcome, names, elastic.hosts_of


@needs_cluster
def test_elastic_workers_across_hosts_over_ssh():
    """Issue 11 across simulated hosts: a host added then the first removed, and a worker killed
    mid-step with a replacement host, each checked as on one machine (rounds, weights)."""
    before = machine_state()
    with SimulatedCluster(hosts=3, slots=2, rate="1gbit") as c:
        inodes, workdir = c.netns_inodes, c.workdir
        added, names, hosts_of = elastic_over_ssh(c, "add_remove", ["{HOST_A}:2"], 2, 1, 4)
        killed, _, _ = elastic_over_ssh(c, "kill_then_replace", ["{HOST_A}:2", "{HOST_B}:2"], 4, 2, 4)
    A, B, C = names["A"], names["B"], names["C"]
    assert added.run.returncode == 0, added.output[-5000:]
    assert hosts_of(added.rounds()) == [(2, {A}), (4, {A, B}), (2, {B})], added.rounds()
    assert f"{A}[0] has been removed from elastic job" in added.output
    added.check_weights()
    assert killed.run.returncode == 0, killed.output[-5000:]
    assert hosts_of(killed.rounds()) == [(4, {A, B}), (2, {B}), (4, {B, C})], killed.rounds()
    killed.check_weights()
    assert_nothing_left(before, inodes, workdir)


@needs_cluster
def test_failing_command_and_exception_leave_nothing_behind():
    before = machine_state()
    with SimulatedCluster(hosts=2, slots=1, rate="1gbit") as c:
        inodes, workdir = c.netns_inodes, c.workdir
        run = c.horovodrun([sys.executable, "-c", "import sys; sys.exit(3)"], timeout=120)
    assert run.returncode != 0, f"a job whose ranks exit 3 reported success:\n{run.output}"
    assert_nothing_left(before, inodes, workdir)

    with pytest.raises(RuntimeError, match="raised inside the cluster"):
        with SimulatedCluster(hosts=2, rate="1gbit") as c:
            inodes, workdir = c.netns_inodes, c.workdir
            c.popen(1, ["sleep", "600"])            # still running at teardown
            raise RuntimeError("raised inside the cluster")
    assert_nothing_left(before, inodes, workdir)


# Stands in for a machine's init process: the harness runs as its child and every orphan is
# reaped (this machine's PID 1 reaps none, so a killed parent leaves zombies of its children).
REAPER = """
import ctypes, os, subprocess, sys
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)          # PR_SET_CHILD_SUBREAPER
child = subprocess.Popen(sys.argv[1:])
print(child.pid, flush=True)
while True:
    try:
        os.wait()
    except ChildProcessError:
        break
"""
HARNESS_THEN_SLEEP = """
import time
from tools.simcluster.cluster import SimulatedCluster
c = SimulatedCluster(hosts=2).__enter__()
print(c.workdir, *sorted(c.netns_inodes), flush=True)
c.popen(1, ['sleep', '600'])
time.sleep(600)
"""


@needs_cluster
def test_killed_harness_takes_its_hosts_along_and_cleanup_removes_the_rest():
    before = machine_state()
    reaper = subprocess.Popen([sys.executable, "-c", REAPER, sys.executable, "-c", HARNESS_THEN_SLEEP],
                              cwd=launch.ROOT, stdout=subprocess.PIPE, text=True)
    try:
        harness_pid = int(reaper.stdout.readline())
        workdir, *inodes = reaper.stdout.readline().split()
        inodes = {int(i) for i in inodes}
        assert processes.processes_holding_netns(inodes)
        os.kill(harness_pid, signal.SIGKILL)
        reaper.wait(timeout=20)                     # returns once every orphan was reaped
    finally:
        if reaper.poll() is None:
            reaper.kill()
            reaper.wait()
    deadline = time.monotonic() + 10
    while processes.processes_holding_netns(inodes) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not processes.processes_holding_netns(inodes), "hosts outlived their killed harness"
    assert os.path.isdir(workdir)                    # only the temporary directory remains
    out = subprocess.run([sys.executable, "-m", "tools.simcluster.cluster", "--cleanup"], cwd=launch.ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and workdir in out.stdout, out.stdout + out.stderr
    assert_nothing_left(before, inodes, workdir)


@needs_cluster
def test_cli_runs_a_command_in_host0_and_returns_its_status():
    before = machine_state()
    out = subprocess.run(
        [sys.executable, "-m", "tools.simcluster.cluster", "--hosts", "3", "--slots", "2", "--servers", "1",
         "--rate", "500mbit", "--",
         "sh", "-c", 'echo "$(hostname) $HVDSIM_HOSTS $HVDSIM_NP"; ssh simhost2 hostname; ssh simhost3 hostname; exit 7'],
        cwd=launch.ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 7, out.stdout + out.stderr
    # The server-only host (simhost3) is up and reachable but not in horovodrun's host list.
    assert out.stdout.split("\n")[:3] == ["simhost0 simhost0:2,simhost1:2,simhost2:2 6", "simhost2", "simhost3"], \
        out.stdout + out.stderr
    after = machine_state()
    assert after == before


@needs_cluster
def test_links_are_shaped_to_the_configured_rate():
    with SimulatedCluster(hosts=2, rate="200mbit") as c:
        one_way = link_bound.measure_link(c, 1, 0, seconds=1.5)
        both = link_bound.measure_link(c, 0, 1, seconds=1.5, bidirectional=True)
    # TCP payload over 1500-byte frames is at most 1448/1514 = 95.6% of the shaped rate.
    for bps in (one_way.sent_bps, both.sent_bps, both.reverse_bps):
        assert 0.80 * 200e6 <= bps <= 0.97 * 200e6, f"{one_way.describe()}; {both.describe()}"


@needs_cluster
def test_two_group_topologies():
    # Inside a group, hosts share one 100 Mbit/s link; across groups, every pair has its own.
    shared_inside = cluster_spec.ClusterSpec.from_dict({
        "rate": "1gbit", "hosts": [{"group": "a"}, {"group": "a"}, {"group": "b"}, {"group": "b"}],
        "intra": {"link": "shared", "rate": "100mbit"}, "cross": {"link": "direct", "rate": "400mbit"}})
    with SimulatedCluster(spec=shared_inside) as c:
        intra = link_bound.measure_link(c, 1, 0, seconds=1.5).sent_bps
        cross = link_bound.measure_link(c, 2, 0, seconds=1.5).sent_bps
    assert 0.8 * 100e6 <= intra <= 0.97 * 100e6 and 0.8 * 400e6 <= cross <= 0.97 * 400e6, (intra, cross)
    # The reverse: full links inside a group, one 100 Mbit/s uplink per group across.
    shared_across = cluster_spec.ClusterSpec.from_dict({
        "rate": "400mbit", "hosts": [{"group": "a"}, {"group": "a"}, {"group": "b"}, {"group": "b"}],
        "cross": {"link": "shared", "rate": "100mbit"}})
    with SimulatedCluster(spec=shared_across) as c:
        intra = link_bound.measure_link(c, 1, 0, seconds=1.5).sent_bps
        cross = link_bound.measure_link(c, 2, 0, seconds=1.5).sent_bps
    assert 0.8 * 400e6 <= intra <= 0.97 * 400e6 and 0.8 * 100e6 <= cross <= 0.97 * 100e6, (intra, cross)


def test_cluster_descriptions_are_checked():
    spec = cluster_spec.ClusterSpec.uniform(3, slots=2, rate="1gbit", servers=1)
    assert spec.host_list() == "simhost0:2,simhost1:2,simhost2:2" and spec.servers() == [3]
    assert cluster_spec.ClusterSpec.from_dict(spec.to_dict()) == spec
    assert cluster_spec.parse_rate("1gbit") == 10**9 and cluster_spec.parse_rate("100mbps") == 8 * 10**8
    assert cluster_spec.parse_rate("none") is None
    bad = [
        ({"hosts": 2, "rate": "fast"}, "rate 'fast' is not understood"),
        ({"hosts": [{"name": "a"}, {"name": "a"}]}, "the name is used twice"),
        ({"hosts": [{"role": "server"}, {}]}, "must be a worker"),
        ({"hosts": [{"group": "a"}, {}]}, "either every host has a 'group' or none has"),
        ({"hosts": 2, "cross": {"link": "shared", "rate": "1gbit"}}, "needs hosts with groups"),
        ({"hosts": [{"group": "a"}, {"group": "b"}], "intra": {"link": "direct"}}, "intra.link 'direct' needs a rate"),
        ({"hosts": [{"group": "a"}, {"group": "a"}], "cross": {"link": "direct", "rate": "1gbit"}},
         "needs at least two groups"),
        ({"hosts": 2, "speed": 1}, "unknown top-level field"),
    ]
    for desc, message in bad:
        with pytest.raises(cluster_spec.SpecError, match=message):
            cluster_spec.ClusterSpec.from_dict(desc)
