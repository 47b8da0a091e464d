"""The single-host benchmark suite (benchmarks/single_host) end to end: the smoke preset runs
herring, torch-gloo and MPI through their real launchers on tiny workloads and writes the report
with its tables and plots (the Horovod-with-PyTorch peer is not needed: building it takes minutes,
the full run does that). Also: the generated model shapes, the bound and goal arithmetic, and that
a failing workload is reported and does not stop the run."""

import json
import os
import re
import subprocess
import sys
import tempfile

import pytest

from benchmarks.single_host.results import Results
from launch import ROOT

SMOKE_STACKS = ["herring", "torch-gloo", "mpi"]


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out_dir = str(tmp_path_factory.mktemp("bench-smoke"))
    out = os.path.join(out_dir, "benchmarks.md")
    env = dict(os.environ, HERRING_BENCH_CACHE=os.path.join(out_dir, "cache"))
    proc = subprocess.run([sys.executable, "-m", "benchmarks.single_host.run", "--preset", "smoke",
                           "--no-peer-setup", "--out", out], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with open(out) as f:
        md = f.read()
    with open(os.path.join(out_dir, "single_host.json")) as f:
        data = json.load(f)
    return out_dir, md, data, proc.stderr


def _table_rows(md, heading):
    """Rows (lists of cells) of the first table after a heading line."""
    section = md.split(heading, 1)[1]
    rows = [l for l in section.split("\n\n", 3)[1:3] if l.startswith("|")]
    lines = rows[0].splitlines()
    return [[c.strip() for c in l.strip("|").split("|")] for l in lines[2:]]


def test_every_stack_ran_every_workload(smoke):
    _, _, data, log = smoke
    assert data["launches"], log
    failed = [(l["stack"], l["np"], l["error_lines"] or l["output_tail"]) for l in data["launches"] if not l["ok"]]
    assert not failed, failed
    res = Results(data)
    for stack in SMOKE_STACKS:
        for size in (4096, 65536):
            times = res.samples("allreduce", stack, 2, bytes=size)
            assert len(times) >= 3 and all(t > 0 for t in times), (stack, size, times)
        for wid in ("gradset-resnet18", "tiny", "train"):
            assert res.median(wid, stack, 2) is not None, (stack, wid)
        for wid in ("gradset-resnet18", "train"):
            assert res.baseline(wid, stack, 2) is not None, (stack, wid)
    assert res.median("tiny", "herring", 2, "cache-off") is not None
    for stack in ("herring", "torch-gloo"):  # hvd.SyncBatchNorm / nn.SyncBatchNorm's algorithm, on CPU
        assert res.median("syncbn", stack, 2) is not None, stack


def test_the_cache_variant_reaches_the_engine(smoke):
    # Cache on: steady-state steps hit the response cache; HOROVOD_CACHE_CAPACITY=0: never.
    _, _, data, _ = smoke
    res = Results(data)
    on = res.record("tiny", stack="herring", variant="")["counters"]
    off = res.record("tiny", stack="herring", variant="cache-off")["counters"]
    assert on["cache_hits"] > 0, on
    assert off["cache_hits"] == 0 and off["coordinator_rounds"] > on["coordinator_rounds"], (on, off)


def test_report_has_the_tables_and_plots(smoke):
    out_dir, md, data, _ = smoke
    for heading in ("## Goals", "## The memory-traffic bound of this machine", "## Allreduce, one host",
                    "### 2 ranks", "## Gradient sets of real models", "tiny tensors per step",
                    "## A communication-heavy training loop", "## Simulated cluster and the link bound",
                    "## How each stack runs"):
        assert heading in md, heading
    for fact in ("| CPU |", "| Memory |", "| Kernel / OS |", "| torch |", "| openmpi |", "| hvd_herring |"):
        assert fact in md, fact
    assert data["machine"]["cores"] == os.cpu_count()

    # The allreduce table: one column per stack; every peer cell carries its ratio to herring,
    # and the ratio is the one the raw results give.
    rows = _table_rows(md, "### 2 ranks")
    assert [r[0] for r in rows] == ["4 KiB", "64 KiB"], rows
    res = Results(data)
    header = md.split("### 2 ranks", 1)[1].split("| Size |", 1)[1].splitlines()[0]
    columns = [c.strip() for c in header.strip("|").split("|")]
    assert columns[:3] == SMOKE_STACKS, columns
    for row, size in zip(rows, (4096, 65536)):
        for stack, cell in zip(columns[1:3], row[2:4]):
            m = re.search(r"\((\d+\.\d\d)x\)", cell)
            assert m, cell
            expected = res.median("allreduce", stack, 2, bytes=size) / res.median("allreduce", "herring", 2, bytes=size)
            assert float(m.group(1)) == pytest.approx(expected, abs=0.006), (stack, size, cell)

    goals = _table_rows(md, "## Goals")
    assert len(goals) == 8, goals
    assert all(g[-1] in ("**met**", "**not met**", "not measured") for g in goals), goals

    bw = _table_rows(md, "## The memory-traffic bound of this machine")
    assert {(r[0], r[1]) for r in bw} == {("copy", "1"), ("add", "1"), ("copy", str(os.cpu_count())),
                                          ("add", str(os.cpu_count()))}, bw

    for name in ("allreduce_np2.png", "gradsets.png", "tiny.png", "train.png"):
        path = os.path.join(out_dir, "img", name)
        with open(path, "rb") as f:
            head = f.read(8)
        assert head == b"\x89PNG\r\n\x1a\n" and os.path.getsize(path) > 10_000, name
        assert f"](img/{name})" in md, name


def test_gradient_sets_have_the_real_shapes():
    sys.path.insert(0, os.path.join(ROOT, "benchmarks", "workers"))
    import gradient_sets
    assert gradient_sets.describe("resnet50") == {"tensors": 161, "params": 25_557_032}
    assert gradient_sets.describe("bert-base") == {"tensors": 199, "params": 109_482_240}
    assert gradient_sets.describe("resnet18") == {"tensors": 62, "params": 11_689_512}
    shapes = dict(gradient_sets.resnet50_shapes())
    assert shapes["layer3.0.downsample.0.weight"] == (1024, 512, 1, 1)
    assert shapes["fc.weight"] == (1000, 2048)


def test_bound_and_goal_arithmetic():
    mib = 1 << 20
    data = {"plan": {"stacks": ["herring", "torch-gloo", "horovod-gloo", "mpi"], "nps": [4]},
            "membw": {"results": [{"kernel": "copy", "procs": 2, "median": 20e9, "rates": [20e9]},
                                  {"kernel": "copy", "procs": 1, "median": 11e9, "rates": [11e9]},
                                  {"kernel": "add", "procs": 2, "median": 16e9, "rates": [16e9]}]},
            "records": []}

    def rec(workload, stack, t, **kw):
        data["records"].append(dict(workload=workload, stack=stack, np=4, variant="", times=[t, t * 2, t / 2], **kw))

    rec("allreduce", "herring", 0.03, bytes=64 * mib)
    rec("allreduce", "torch-gloo", 0.105, bytes=64 * mib)
    rec("allreduce", "horovod-gloo", 0.15, bytes=64 * mib)
    rec("allreduce", "mpi", 0.075, bytes=64 * mib)
    rec("allreduce", "herring-zero-copy", 0.018, bytes=64 * mib)
    rec("tiny", "herring", 0.01, count=1000)
    rec("tiny", "horovod-gloo", 0.02, count=1000)
    res = Results(data)
    # 2*N*S bytes of traffic at twice the copy rate of every core (the 2-process measurement).
    assert res.memory_bound(64 * mib, 4) == pytest.approx(4 * 64 * mib / 20e9)
    goals = {g[0].split(": ", 1)[1]: (g[3], g[4]) for g in res.goals()}
    bound_ratio, bound_met = goals["herring, ordinary tensors, within 1.5x of the memory-traffic bound"]
    assert bound_ratio == pytest.approx(0.03 / (4 * 64 * mib / 20e9)) and bound_met is False
    bound_ratio, bound_met = goals["herring, buffers in zero-copy memory, within 1.5x of the memory-traffic bound"]
    assert bound_ratio == pytest.approx(0.018 / (4 * 64 * mib / 20e9)) and bound_met is True
    assert goals["herring >= 3x faster than torch-gloo"] == (pytest.approx(3.5), True)
    assert goals["herring >= 6x faster than horovod-gloo"] == (pytest.approx(5.0), False)
    assert goals["herring >= 2x faster than mpi"] == (pytest.approx(2.5), True)
    assert goals["herring >= 3x faster than horovod-gloo (cache on)"] == (pytest.approx(2.0), False)


def test_a_failing_workload_is_reported_and_the_rest_still_runs():
    from benchmarks.single_host import run
    from benchmarks.single_host.plan import Plan
    good = {"id": "allreduce", "kind": "allreduce", "sizes": [4096],
            "timing": {"warmup": 1, "min_iters": 2, "max_iters": 2}, "timeout": 60}
    broken = {"id": "broken", "kind": "allreduce", "sizes": ["not-a-size"], "timeout": 60}
    plan = Plan(preset="test", nps=[2], stacks=["mpi"], repeats=1, workloads=[broken, good], membw={})
    with tempfile.TemporaryFile("w+") as log:
        records, launches = run.run(plan, {}, log)
        log.seek(0)
        assert "TypeError" in log.read()
    # The first launch fails in `broken` (its error is recorded with the rank), then `allreduce`,
    # which it never reached, runs alone and succeeds.
    assert [(l["workloads"], l["ok"]) for l in launches] == [(["broken"], False), (["allreduce"], True)], launches
    errors = launches[0]["errors"]
    assert {e["rank"] for e in errors} == {0, 1}
    assert all(e["workload"] == "broken" and "TypeError" in e["error"] for e in errors), errors
    assert [(r["workload"], r["bytes"], r["stack"]) for r in records] == [("allreduce", 4096, "mpi")]


def test_cluster_results_fill_their_slot(smoke, tmp_path):
    from benchmarks.single_host.report import write_report
    _, md, data, _ = smoke
    assert "Not part of this run" in md
    cluster = {"description": "Four simulated hosts, 1 Gbit/s links.",
               "records": [{"setup": "4x2, 1 Gbit/s", "stack": "herring", "np": 8, "bytes": 64 << 20,
                            "median": 0.6, "link_bound": 0.54},
                           {"setup": "4x2, 1 Gbit/s", "stack": "herring-ring", "np": 8, "bytes": 64 << 20,
                            "median": 1.2}],
               "goals": [{"goal": "cluster goal A", "target": ">= 1.8x", "measured": "ring 1.2 s, herring 0.6 s",
                          "ratio": 2.0, "met": True}]}
    out = str(tmp_path / "benchmarks.md")
    write_report(data, out, os.path.join(os.path.dirname(out), "img"), cluster)
    with open(out) as f:
        text = f.read()
    assert "| cluster goal A | >= 1.8x | ring 1.2 s, herring 0.6 s | 2.00x | **met** |" in text
    assert "Four simulated hosts, 1 Gbit/s links." in text
    assert "| 4x2, 1 Gbit/s | 8 | 64 MiB | herring | 600 ms | 1.00x | 540 ms | 90% |" in text
    assert "| 4x2, 1 Gbit/s | 8 | 64 MiB | herring-ring | 1.2 s | 2.00x | - | - |" in text


def _records(kind, rows):
    """Synthetic run data: rows of (stack, variant, np, key, median)."""
    recs = []
    for stack, variant, np, key, median in rows:
        rec = {"kind": kind, "workload": "tiny" if key == "tiny" else kind, "stack": stack, "variant": variant,
               "np": np, "median": median}
        if kind == "allreduce" or key == "tiny":
            rec["bytes"] = 4 if key == "tiny" else key
            rec["count"] = 1000
        else:
            rec["model"] = key
        recs.append(rec)
    return {"records": recs, "launches": [], "machine": {"date": "today"},
            "meta": {"command": "python -m benchmarks.single_host.run --preset x", "results_path": "x.json"}}


def test_latency_report_tables_and_verdicts(tmp_path):
    from benchmarks.single_host import latency_report
    data = _records("allreduce", [
        ("herring", "", 2, 4096, 20e-6), ("torch-gloo", "", 2, 4096, 300e-6), ("mpi", "", 2, 4096, 4e-6),
        ("herring", "tcp-control", 2, 4096, 130e-6), ("herring", "loop-only", 2, 4096, 30e-6),
        ("herring", "", 2, 1 << 20, 300e-6), ("torch-gloo", "", 2, 1 << 20, 900e-6), ("mpi", "", 2, 1 << 20, 100e-6),
        ("herring", "", 2, "tiny", 5e-3), ("horovod-gloo", "", 2, "tiny", 20e-3)])
    for stack, np, median in (("herring", 2, 10e-3), ("torch-gloo", 2, 25e-3), ("herring", 4, 20e-3),
                              ("torch-gloo", 4, 30e-3)):
        data["records"].append({"kind": "syncbn", "workload": "syncbn", "stack": stack, "variant": "", "np": np,
                                "bytes": 4000, "median": median, "model": "conv-16-32-32", "params": 1000,
                                "batch": 8, "image": 32})
    md = latency_report.section(data, str(tmp_path), str(tmp_path / "img"))
    assert ("| SyncBatchNorm-bound training step, np=2: hvd.SyncBatchNorm on herring faster than DDP with "
            "nn.SyncBatchNorm's algorithm on gloo | >= 2.0 | 2.50x | met |") in md, md
    assert "np=4: hvd.SyncBatchNorm on herring faster than DDP with nn.SyncBatchNorm's algorithm on gloo | >= 2.0 | 1.50x | not met |" in md
    assert "| 4 | 20 ms | 30 ms | 1.50x |" in md, md
    assert (tmp_path / "img" / "latency_syncbn.png").exists()
    assert "| 4 KiB allreduce, one host, np=2: herring median | <= 30 µs | 20 µs | met |" in md, md
    assert "| faster than torch-gloo at every size measured, np=2 (slowest ratio) | >= 1.0 | 3.00x | met |" in md
    # 1 MiB: MPI 100 µs, herring 300 µs: a third of MPI's speed, outside 2x.
    assert "| within 2x of Open MPI from 1 MiB, np=2 (herring's speed / MPI's, lowest) | >= 0.5 | 0.33x | not met |" in md
    assert "| 1000 tiny tensors per step, np=2: herring faster than horovod-gloo | >= 3.0 | 4.00x | met |" in md
    assert "| 4 KiB | 20 µs | 30 µs (1.50x) | 130 µs (6.50x) | 300 µs (15.00x) | - | 4 µs (0.20x) |" in md, md
    assert (tmp_path / "img" / "latency_allreduce.png").exists()
    # No large-size records: no large-size rows (rather than rows claiming something unmeasured).
    assert "64 MiB allreduce" not in md


def test_latency_report_large_size_goals(tmp_path):
    """64 MiB at np=4 against torch-gloo (>= 5x) and the memory-traffic bound (<= 1.4x): with
    memcpy at 10 GB/s on every core the bound is 4 * 64 MiB / 10 GB/s = 26.8 ms."""
    from benchmarks.single_host import latency_report
    size = 64 << 20
    data = _records("allreduce", [("herring", "", 4, size, 30e-3), ("herring-zero-copy", "", 4, size, 40e-3),
                                  ("torch-gloo", "", 4, size, 140e-3)])
    for r in data["records"]:
        r["workload"] = "allreduce-large"
    data["membw"] = {"results": [{"kernel": "copy", "procs": 2, "median": 10e9}]}
    data["plan"] = {"workloads": [{"id": "allreduce", "timing": {"warmup": 20, "warmup_seconds": 0.5}}]}
    md = latency_report.section(data, str(tmp_path), str(tmp_path / "img"))
    assert "Every size first warms up for 0.5 s (at least 20 iterations)" in md, md  # from the run's plan
    assert ("| 64 MiB allreduce, np=4: herring faster than torch-gloo | >= 5x | 4.67x (torch-gloo 140 ms, "
            "herring 30 ms) | not met |") in md, md
    assert ("| 64 MiB allreduce, np=4: herring, ordinary tensors, within 1.4x of the memory-traffic bound | <= 1.4x "
            "| 1.12x (30 ms, bound 26.8 ms) | met |") in md, md
    assert ("| 64 MiB allreduce, np=4: herring, buffers in zero-copy memory, within 1.4x of the memory-traffic "
            "bound | <= 1.4x | 1.49x (40 ms, bound 26.8 ms) | not met |") in md, md


def test_the_warm_up_fills_its_seconds():
    """timed_loop's warm-up runs on past its count until warmup_seconds have passed (the same number
    of iterations on every rank, since the elapsed time it compares is a collective's result)."""
    sys.path.insert(0, os.path.join(ROOT, "benchmarks", "workers"))
    import time
    import workloads

    class OneRank:
        barrier = staticmethod(lambda: None)
        max_of = staticmethod(lambda value: value)

    calls = []
    times = workloads.timed_loop(OneRank(), lambda: None, lambda: (calls.append(1), time.sleep(0.01)),
                                 {"warmup": 2, "min_iters": 3, "max_iters": 3, "budget": 0.0,
                                  "warmup_seconds": 0.1})
    assert len(times) == 3
    # 0.1 s of 10 ms iterations after the 2 counted ones: at least 8 more before the timed 3.
    assert len(calls) - len(times) >= 2 + 8, len(calls)


def test_ddp_report_tables_and_verdicts():
    from benchmarks.single_host import ddp_report
    data = _records("gradset", [
        ("torch-gloo", "", 4, "resnet50", 0.100), ("ddp-herring", "", 4, "resnet50", 0.040),
        ("herring", "", 4, "resnet50", 0.038),
        ("torch-gloo", "", 4, "bert-base", 0.300), ("ddp-herring", "", 4, "bert-base", 0.200),
        ("herring", "", 4, "bert-base", 0.100),
        ("torch-gloo", "bucket-view", 4, "bert-base", 0.250),
        ("ddp-herring", "bucket-view-average-hook", 4, "bert-base", 0.105)])
    md = ddp_report.section(data)
    # With the hook, herring is compared with gloo's bucket view (gloo has no such hook).
    assert ("| bert-base, np=4, gradient_as_bucket_view + average_hook (gloo: bucket view): DDP on herring faster "
            "than on gloo | >= 2x | 2.38x | met |") in md, md
    assert ("| bert-base, np=4, gradient_as_bucket_view + average_hook: DDP on herring within 10% of Horovod's API "
            "on herring | <= 1.10x | 1.05x | met |") in md, md
    assert "| resnet50, np=4, torch's defaults: DDP on herring faster than on gloo | >= 2x | 2.50x | met |" in md, md
    assert "| bert-base, np=4, torch's defaults: DDP on herring faster than on gloo | >= 2x | 1.50x | not met |" in md
    assert "| resnet50, np=4, torch's defaults: DDP on herring within 10% of Horovod's API on herring | <= 1.10x | 1.05x | met |" in md
    assert "| bert-base, np=4, torch's defaults: DDP on herring within 10% of Horovod's API on herring | <= 1.10x | 2.00x | not met |" in md
    assert ("| bert-base, np=4, gradient_as_bucket_view: DDP on herring within 10% of Horovod's API on herring | <= 1.10x "
            "| - | not measured |") in md
    assert "| resnet50, np=4, gradient_as_bucket_view: DDP on herring faster than on gloo | >= 2x | - | not measured |" in md


def test_peers_report_gives_issue_27s_verdict_per_size(tmp_path):
    # Issue 27: herring at or ahead of every peer at every size, within 2x of Open MPI at 4 KiB.
    from benchmarks.single_host import peers_report
    recs = []
    for stack, np, size, t in (("herring", 2, 4096, 8e-6), ("mpi", 2, 4096, 2e-6), ("deepspeed-shm", 2, 4096, 5e-6),
                               ("torch-gloo", 2, 4096, 300e-6), ("herring", 2, 1 << 20, 60e-6),
                               ("mpi", 2, 1 << 20, 90e-6), ("deepspeed-shm", 2, 1 << 20, 120e-6),
                               ("herring", 4, 4096, 30e-6), ("mpi", 4, 4096, 20e-6), ("deepspeed-shm", 4, 4096, 3e-3)):
        recs.append({"kind": "allreduce", "workload": "allreduce", "stack": stack, "variant": "", "np": np,
                     "bytes": size, "times": [t, t, t], "median": t})
    data = {"records": recs, "launches": [], "plan": {"stacks": ["herring", "torch-gloo", "mpi", "deepspeed-shm"],
                                                      "nps": [2, 4], "workloads": []},
            "machine": {"date": "today", "versions": {"deepspeed (peer)": "0.19.8"}},
            "meta": {"command": "python -m benchmarks.single_host.run --preset peers", "results_path": "x.json"}}
    md = peers_report.section(data, str(tmp_path), str(tmp_path / "img"))
    assert "| 2 | 4 KiB | 8 µs | 37.50x | 0.25x | 0.63x | mpi 0.25x | not met |" in md, md
    assert "| 2 | 1 MiB | 60 µs | - | 1.50x | 2.00x | mpi 1.50x | met |" in md, md
    assert "| 4 | 4 KiB | 30 µs | - | 0.67x | 100.00x | mpi 0.67x | not met |" in md, md
    assert "| 2 | 8 µs | 2 µs | 4.00x | not met |" in md and "| 4 | 30 µs | 20 µs | 1.50x | met |" in md, md
    assert "At or ahead of every peer at 1 of 3 (np, size) points measured." in md, md
    assert "| 4 KiB | 8 µs | 300 µs (37.50x) | 2 µs (0.25x) | 5 µs (0.63x) |" in md, md
    assert (tmp_path / "img" / "peers_allreduce.png").exists()
    assert "| 1 MiB | - | - | - | - |" not in md, md   # np=4 did not measure 1 MiB: no empty row


def test_peers_report_shows_each_launch_beside_its_round_trip(tmp_path):
    # A pooled median can hide that one stack's launches met the slow CPU placement and another's
    # did not: the report lists each launch's median with the round trip measured before it.
    from benchmarks.single_host import peers_report
    recs, launches = [], []
    for stack, repeat, t, trip in (("herring", 0, 300e-6, 140.0), ("mpi", 0, 1.1e-3, 530.0),
                                   ("herring", 1, 330e-6, 135.0), ("mpi", 1, 216e-6, 107.0)):
        recs.append({"kind": "allreduce", "workload": "allreduce", "stack": stack, "variant": "", "np": 2,
                     "bytes": 4 << 20, "times": [t], "median": t, "repeat": repeat})
        launches.append({"stack": stack, "np": 2, "repeat": repeat, "ok": True, "core_round_trip_ns": [trip, trip]})
    data = {"records": recs, "launches": launches, "plan": {"stacks": ["herring", "mpi"], "nps": [2], "repeats": 2,
                                                            "workloads": []},
            "machine": {"date": "today", "versions": {}},
            "meta": {"command": "python -m benchmarks.single_host.run --preset peers", "results_path": "x.json"}}
    md = peers_report.section(data, str(tmp_path), str(tmp_path / "img"))
    assert "| 2 | 4 MiB | 300 µs (140 ns) / 330 µs (135 ns) | 1.1 ms (530 ns) / 216 µs (107 ns) |" in md, md
