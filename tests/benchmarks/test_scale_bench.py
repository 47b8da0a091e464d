"""The scale benchmark (benchmarks/scale, issue 27) end to end on its smoke preset: a real
simulated cluster of 4 hosts, 16 and 32 engine ranks (numpy only) launched directly in their hosts
against Horovod's RendezvousServer, today's design and the hierarchical one side by side, the
calibration measurements, the goals, the model and the pages. Checks that every rank's every
allreduce equalled the exact reference, that the JSON has every figure of every launch, that the
design the build lacks is recorded as such, and that what was measured is what a full mesh must
show (sockets growing with N). No timing assertions."""

import json
import math
import os
import subprocess
import sys

import pytest

from benchmarks.scale import designs, goals, model, presets
from benchmarks.scale.summary import FIGURES
from launch import ROOT
from simulated_cluster import needs_cluster

SMOKE = presets.PRESETS["smoke"]


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out_dir = str(tmp_path_factory.mktemp("scale-bench"))
    out = os.path.join(out_dir, "scale.json")
    proc = subprocess.run([sys.executable, "-m", "benchmarks.scale.run", "--preset", "smoke", "--out", out],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    with open(out) as f:
        data = json.load(f)
    return out_dir, data, proc.stderr


def _jobs(data, kind, design):
    return {j["n"]: j for j in data["jobs"] if j["kind"] == kind and j["design"] == design}


@needs_cluster
def test_every_rank_of_every_launch_equals_the_reference(smoke):
    _, data, log = smoke
    launched = [j for j in data["jobs"] if j["status"] != "not available in this build"]
    assert launched, log
    for j in launched:
        assert j["status"] == "ok", (j["kind"], j["design"], j["n"], j.get("error"), log[-3000:])
        f = j["figures"]
        assert f["ranks_reported"] == j["n"], (j["n"], f["ranks_reported"])
        assert f["every_result_equals_reference"] is True and not f["wrong"], f["wrong"]
        assert f["tiny_iterations"] == SMOKE["iters"], f


@needs_cluster
def test_the_json_has_every_figure_at_every_n(smoke):
    _, data, _ = smoke
    for d in ("today", "hierarchical"):
        jobs = _jobs(data, "herring", d)
        assert sorted(jobs) == SMOKE["ns"], (d, sorted(jobs))
    for j in data["jobs"]:
        if j["status"] != "ok":
            continue
        f = j["figures"]
        for key in FIGURES:
            assert f.get(key) is not None, (j["kind"], j["design"], j["n"], key)
        assert f["init_seconds"] >= f["init_after_last_call_seconds"] > 0
        if j["kind"] == "herring":
            # 1 MiB in place fits at every N of the smoke preset: measured, and every rank's checked.
            assert j["big_bytes"] == SMOKE["big_bytes"] and f["big_bytes"] == SMOKE["big_bytes"], j
            assert f["big_iterations"] == SMOKE["big_iters"] and f["big_seconds"] > 0
        assert f["rss_per_rank_bytes"]["min"] > 10 * 2**20
    m = data["machine"]
    assert m["cores"] == os.cpu_count() and len(data["load_average_start"]) == 3
    cal = data["calibration"]
    assert cal["link_bps"] > 1e8 and cal["rtt"]["sizes"][0]["median"] > 0 and cal["store"]["get"] > 0, cal
    # The lockstep floor at every N: N processes really took turns (a cycle can't be faster than
    # the N - 1 answers' system calls) and the per-process figure is the cycle x cores / N.
    floors = cal["lockstep_floor"]
    assert [f["n"] for f in floors] == sorted(SMOKE["ns"]), floors
    for f in floors:
        assert f["iters"] == SMOKE["iters"] and f["p25_seconds"] <= f["median_seconds"] <= f["p75_seconds"], f
        assert f["median_seconds"] > (f["n"] - 1) * 1e-7, f
        assert math.isclose(f["per_process_seconds"], f["median_seconds"] * f["cores"] / f["n"]), f


@needs_cluster
def test_today_is_a_full_mesh_and_the_missing_design_is_said(smoke):
    _, data, _ = smoke
    today = _jobs(data, "herring", "today")
    lo, hi = (today[n]["figures"]["tcp_established_per_rank"]["median"] for n in SMOKE["ns"])
    # A full mesh: every rank holds connections to the peers of other hosts at least, so the count
    # grows with N (16 -> 32 ranks on the same 4 hosts adds at least 12 cross-host peers).
    assert hi >= lo + 12, (lo, hi)
    hier = _jobs(data, "herring", "hierarchical")
    if "HERRING_CONNECTIONS" in designs.build_knobs():
        assert all(j["status"] == "ok" for j in hier.values()), hier
    else:
        for j in hier.values():
            assert j["status"] == "not available in this build" and "HERRING_CONNECTIONS" in j["error"], j
        assert data["designs"]["hierarchical"]["status"].startswith("not available in this build")


@needs_cluster
def test_goals_model_and_pages(smoke):
    out_dir, data, _ = smoke
    evaluated = goals.evaluate(data)
    assert sorted((g["design"], g["goal"]) for g in evaluated) == sorted(
        (d, g) for d in ("today", "hierarchical") for g in ("cycle", "sockets", "init", "init_engine"))
    for g in evaluated:
        if g["design"] == "today":
            assert g["value"] is not None and g["met"] in (True, False), g
    p = model.calibrate(data)
    for key in ("c_rank", "L", "c_msg", "c_get", "beta"):
        assert p[key] > 0 and math.isfinite(p[key]), (key, p[key])
    preds = model.predictions(p)
    assert {(r["n"], r["link_bps"], r["design"]) for r in preds} == {
        (n, b, d) for n in model.SCALES for b in model.LINKS_BPS for d in ("today", "hierarchical")}
    for r in preds:
        assert all(r[k] > 0 and math.isfinite(r[k]) for k in ("tiny_cycle_seconds", "big_seconds", "init_seconds",
                                                               "tcp_per_rank", "rss_per_rank_bytes")), r
    check = model.bert_check(p)
    assert check["gpus"] == 2048 and all(0 < r["efficiency_no_overlap"] <= r["efficiency_overlap"] <= 1
                                         for r in check["rows"]), check
    with open(os.path.join(out_dir, "benchmarks_scale.md")) as f:
        page = f.read()
    with open(os.path.join(out_dir, "scale.md")) as f:
        model_page = f.read()
    assert "## Goals of the issue" in page and "| today |" in page and "load average" in page
    assert "lockstep floor" in page and "of CPU per rank per cycle, everything included" in page
    assert all(f"| {n} |" in model_page for n in model.SCALES) and "85%" in model_page
    assert os.path.exists(os.path.join(out_dir, "scale_measured.png"))
    assert os.path.exists(os.path.join(out_dir, "scale_model.png"))
