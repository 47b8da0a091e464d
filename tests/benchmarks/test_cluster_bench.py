"""The simulated-cluster benchmarks end to end: the smoke preset builds a real simulated cluster
(2 worker hosts + 2 server hosts, shaped links, sshd, horovodrun over ssh), runs herring with
dedicated servers, the ring, PSLD with a slowed server and the batch-size tuner, and writes the
results JSON, the plots and the markdown section. Checks what the run measured against what the
cluster must have done (bytes on the links, server shards, partition maps, batch sizes), that
the JSON is what `benchmarks.single_host.report --cluster-results` reads, and the link-bound
arithmetic."""

import json
import os
import re
import subprocess
import sys

import pytest

from benchmarks.cluster import analysis as cluster_analysis
from launch import ROOT
from simulated_cluster import needs_cluster

MiB = 1 << 20


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out_dir = str(tmp_path_factory.mktemp("cluster-bench"))
    out = os.path.join(out_dir, "cluster.json")
    proc = subprocess.run([sys.executable, "-m", "benchmarks.cluster.run", "--preset", "smoke", "--out", out],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    with open(out) as f:
        data = json.load(f)
    with open(os.path.join(out_dir, "benchmarks_cluster.md")) as f:
        md = f.read()
    return out_dir, data, md, proc.stderr


def _scenario(data, sid):
    return next(s for s in data["scenarios"] if s["id"] == sid)


def _launch(data, sid, lid):
    return next(l for l in _scenario(data, sid)["launches"] if l["id"] == lid)


def _record(launch, kind):
    return next(r for r in launch["records"] if r["kind"] == kind)


@needs_cluster
def test_every_launch_ran_and_the_cluster_was_shared(smoke):
    _, data, _, log = smoke
    assert [s["id"] for s in data["scenarios"]] == ["goal", "psld-cpu", "latency"], log
    for s in data["scenarios"]:
        assert s["error"] is None, s["error"]
        for l in s["launches"]:
            assert l["ok"], (s["id"], l["id"], l["errors"], l["output_tail"])
    assert _scenario(data, "psld-cpu")["shared_cluster"] and _scenario(data, "latency")["shared_cluster"]
    link = _scenario(data, "goal")["links"][0]
    # iperf3 through a 1 Gbit/s tbf link: about 95% of it is TCP payload.
    assert 0.80e9 < link["sent_bps"] < 1.0e9, link


@needs_cluster
def test_dedicated_servers_carry_the_traffic_and_the_ring_leaves_them_idle(smoke):
    _, data, _, _ = smoke
    hosts = [h["name"] for h in _scenario(data, "goal")["spec"]["hosts"]]
    workers, servers = hosts[:2], hosts[2:]
    ded = _record(_launch(data, "goal", "herring-dedicated"), "allreduce")
    ring = _record(_launch(data, "goal", "ring"), "allreduce")
    assert ded["np"] == 2 and ring["np"] == 2             # hvd.size() counts the workers only
    assert ded["layout"]["dedicated"] and ded["layout"]["shard_ranks"] == [2, 3], ded["layout"]
    for rec in (ded, ring):
        assert rec["bytes"] == MiB and len(rec["times"]) == 3 and all(t > 0 for t in rec["times"])
        assert len(rec["links"]["iterations"]) == 3
    for it in ded["links"]["iterations"]:
        assert all(it["hosts"][s]["received"] > 0.2 * MiB for s in servers), it
    for it in ring["links"]["iterations"]:
        assert all(it["hosts"][s]["received"] + it["hosts"][s]["sent"] < 4096 for s in servers), it
        assert all(it["hosts"][w]["sent"] > 0.2 * MiB for w in workers), it


@needs_cluster
def test_link_sampler_counts_the_gradient_bytes_of_every_step(smoke):
    # Every step, each worker host pushes its whole gradient (N bytes) to the server shards and
    # pulls N bytes of sums back: over the loop, steps * N each way, plus headers. The counters
    # are sampled and interpolated at the window's start, which can count part of the first
    # step's burst as before the window: at least (steps - 1) * N must be in it.
    _, data, _, _ = smoke
    rec = _record(_launch(data, "psld-cpu", "psld"), "train")
    steps, n = len(rec["step_times"]), rec["bytes"]
    for name in ("simhost0", "simhost1"):
        b = rec["link_window"]["hosts"][name]
        assert 0.95 * (steps - 1) * n < b["sent"] < 1.5 * steps * n, (name, b, steps, n)
        assert 0.95 * (steps - 1) * n < b["received"] < 1.5 * steps * n, (name, b, steps, n)


@needs_cluster
def test_psld_moved_load_off_the_slow_server(smoke):
    _, data, _, _ = smoke
    rec = _record(_launch(data, "psld-cpu", "psld"), "train")
    first, last = rec["layouts"][0], rec["layouts"][-1]
    assert last["version"] > first["version"], (first, last)
    # Server rank 3 (the second shard) sleeps 200 ms per MiB it reduces.
    assert last["shares"][1] < 0.4, last
    an = data["analysis"]["psld-cpu"]
    assert an["slow_shard"] == 1 and an["launches"]["psld"]["map_changes"] > 0


@needs_cluster
def test_batch_tuner_gives_the_slow_worker_less(smoke):
    _, data, _, _ = smoke
    rec = _record(_launch(data, "psld-cpu", "psld"), "hetero")
    equal, tuned = rec["phases"]["equal"]["sizes"], rec["phases"]["tuned"]["sizes"]
    assert all(s == [4, 4] for s in equal), equal
    assert all(sum(s) == 8 for s in tuned) and tuned[-1][1] < tuned[-1][0], tuned
    het = data["analysis"]["hetero"][0]
    assert het["equal_throughput"] > 0 and het["tuned_throughput"] > 0 and het["ideal_compute_gain"] == 2.0


@needs_cluster
def test_results_feed_the_main_report_and_the_markdown_links_its_plots(smoke):
    out_dir, data, md, _ = smoke
    from benchmarks.single_host.report import Report
    assert len(data["goals"]) == 4 and all({"goal", "target", "measured", "ratio", "met"} <= set(g) for g in data["goals"])
    assert data["records"] and all(r["median"] > 0 and r["link_bound"] > 0 for r in data["records"])
    assert any("PSLD" in s for s in data["sections"])
    rep = Report({}, os.path.join(out_dir, "benchmarks.md"), os.path.join(out_dir, "img"), data)
    rep.cluster_section()
    rep_text = "\n".join(rep.parts)
    assert "| 2 worker + 2 server hosts, allreduce | 2 | 1 MiB | herring |" in rep_text, rep_text
    assert [g[0] for g in rep.cluster_goals()] == [g["goal"] for g in data["goals"]]
    for heading in ("## Goals of the performance issue", "## Allreduce across 2 worker hosts",
                    "### Heterogeneous workers", "### PSLD: one server's CPU slowed",
                    "## Small-message latency across hosts", "## Reproducing"):
        assert heading in md, heading
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
    assert len(images) >= 4, images
    for rel in images:
        path = os.path.join(out_dir, rel)
        with open(path, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n", path


@needs_cluster
def test_latency_allreduce_next_to_the_tcp_round_trip(smoke):
    # The 4 KiB allreduce across the 2 worker hosts and the TCP ping-pong between the same two
    # namespaces, both measured in the same run; the report's table and goal row come from them.
    _, data, md, _ = smoke
    sc = _scenario(data, "latency")
    assert sc["error"] is None and not sc["rtt_errors"], sc["rtt_errors"]
    assert [m["when"] for m in sc["rtt"]] == ["before", "after"], sc["rtt"]
    for m in sc["rtt"]:
        assert (m["src"], m["dst"]) == ("simhost1", "simhost0")
        assert [x["bytes"] for x in m["sizes"]] == [1, 4096]
        for x in m["sizes"]:
            # A round trip between two namespaces on one machine: microseconds, not milliseconds.
            assert x["iters"] == 300 and 1e-6 < x["min"] <= x["median"] <= x["p99"] < 0.05, x
    rec = _record(_launch(data, "latency", "herring"), "allreduce")
    assert rec["np"] == 2 and rec["bytes"] == 4096 and len(rec["times"]) == 30, rec["np"]
    # Every collective of an iteration (barrier, allreduce, max) ran as a herring allreduce across
    # the two hosts, through the cached negotiation.
    per = rec["counters_delta"]
    assert per["herring_allreduces"] == 3 * rec["counted_iterations"], per
    assert per["cycles"] >= per["herring_allreduces"] and per["cache_hits"] > 0, per
    lat = data["analysis"]["latency"]
    rtt = lat["rtt"]["1"]["rtt"]
    assert rtt == pytest.approx(sum(m["sizes"][0]["median"] for m in sc["rtt"]) / 2)
    row = next(r for r in lat["rows"] if r["bytes"] == 4096 and r["slots"] == 1)
    assert row["over_rtt"] == pytest.approx(rec["median"] / rtt)
    goal = next(g for g in data["goals"] if "TCP round trip" in g["goal"])
    assert goal["ratio"] == pytest.approx(row["over_rtt"]) and goal["met"] == (row["over_rtt"] <= 3.0)
    assert goal["target"] == "<= 3x" and "4 KiB allreduce" in goal["goal"]
    verdict = "**met**" if goal["met"] else "**not met**"
    assert f"| {goal['goal']} | <= 3x | {goal['measured']} | {goal['ratio']:.2f}x | {verdict} |" in md
    assert re.search(r"\| 4 KiB \| herring, defaults \(colocated servers\) \| 2 \| [0-9.]+ [µm]s \|.*\| "
                     + re.escape(f"{row['over_rtt']:.2f}x") + r" \|", md), md
    assert re.search(r"\| 1 B each way \| before \| [0-9.]+ [µm]s \|", md), md
    assert "![latency](img/cluster_latency.png)" in md


def test_merge_results_replaces_one_scenario(tmp_path):
    from benchmarks.cluster.run import merge_results
    base = {"meta": {"command": "full"}, "machine": {},
            "scenarios": [{"id": "goal", "v": 1}, {"id": "latency", "v": 1}, {"id": "psld", "v": 1}]}
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(base))
    new = {"meta": {"command": "again", "seconds": 60}, "machine": {"date": "today"},
           "scenarios": [{"id": "latency", "v": 2}, {"id": "extra", "v": 2}]}
    merged = merge_results(str(path), new)
    assert [(s["id"], s["v"]) for s in merged["scenarios"]] == [("goal", 1), ("latency", 2), ("psld", 1), ("extra", 2)]
    assert merged["meta"]["command"] == "full"
    assert merged["meta"]["merged"][0]["scenarios"] == ["latency", "extra"]
    assert merged["meta"]["merged"][0]["command"] == "again"


def test_link_bounds():
    # 4 worker + 4 server hosts at a measured 0.95 Gbit/s; one of the servers at a quarter rate.
    spec = {"rate": "1gbit", "hosts": [{"name": f"simhost{i}", "role": "worker"} for i in range(4)]
            + [{"name": f"simhost{4 + i}", "role": "server"} for i in range(4)]}
    links = [{"label": "worker -> worker", "src": "simhost1", "dst": "simhost0", "sent_bps": 0.95e9}]
    cl = cluster_analysis.Cluster({"spec": spec, "links": links})
    n = 64 * MiB
    t = n * 8 / 0.95e9
    assert cluster_analysis.link_bound(cl, "dedicated", n) == pytest.approx(t)
    assert cluster_analysis.link_bound(cl, "ring", n) == pytest.approx(1.5 * t)
    assert cluster_analysis.link_bound(cl, "ring", n, slots=2) == pytest.approx(1.75 * t)
    assert cluster_analysis.link_bound(cl, "colocated", n, slots=2) == pytest.approx(1.5 * t)
    spec["hosts"][7]["rate"] = "250mbit"
    slow = {"label": "worker -> slow server", "src": "simhost0", "dst": "simhost7", "sent_bps": 0.2375e9}
    cl = cluster_analysis.Cluster({"spec": spec, "links": links + [slow]})
    assert cl.slowest_server() == 7
    # Static shares: the slow server receives 4 * N/4 = N over its quarter-rate link.
    assert cluster_analysis.link_bound(cl, "dedicated", n) == pytest.approx(n * 8 / 0.2375e9)
    good = [0.95e9, 0.95e9, 0.95e9, 0.2375e9]
    shares = [g / sum(good) for g in good]
    assert cluster_analysis.link_bound(cl, "dedicated", n, shares=shares) == pytest.approx(4 * n * 8 / sum(good))
