"""Soak (opt-in, tens of minutes): np=4, 10,000 steps of 200 allreduces, every result checked; each rank
samples its resident memory, open file descriptors and threads every 500 steps, and they must
stay flat after the warm-up. Run it with `bash scripts/soak.sh`, which also writes the figures
into docs/reliability.md; or HERRING_SOAK=1 .venv/bin/pytest tests/reliability/test_soak.py -s.
SOAK_STEPS / SOAK_TENSORS / SOAK_SAMPLE_EVERY change the shape (defaults 10000 / 200 / 500)."""

import json
import os

import pytest

import launch

pytestmark = pytest.mark.skipif(
    os.environ.get("HERRING_SOAK") != "1",
    reason="opt-in soak (tens of minutes: 50 on a busy 2-core machine): run `bash scripts/soak.sh` "
           "or HERRING_SOAK=1 .venv/bin/pytest tests/reliability/test_soak.py")

NP = 4
# After the warm-up (the first sample after step 1000: caches, pools and the response cache are
# filled), memory may wander by allocator noise but not climb: at most this much above the
# baseline, at any later sample, per rank.
RSS_TOLERANCE_KB = 4 * 1024
WARMUP_STEPS = 1000


def summarize(per_rank):
    """Per rank: the samples and the figures the doc quotes."""
    out = {}
    for r, o in sorted(per_rank.items()):
        samples = o["samples"]
        after = [s for s in samples if s["step"] >= WARMUP_STEPS] or samples[-1:]
        base = after[0]
        out[r] = {
            "steps": o["steps"], "seconds": o["seconds"], "wrong": len(o["wrong"]), "error": o["error"],
            "rss_mb_first": round(samples[0]["rss_kb"] / 1024, 1),
            "rss_mb_baseline": round(base["rss_kb"] / 1024, 1),
            "rss_mb_last": round(samples[-1]["rss_kb"] / 1024, 1),
            "rss_mb_max_over_baseline": round((max(s["rss_kb"] for s in after) - base["rss_kb"]) / 1024, 2),
            "fds": sorted({s["fds"] for s in after}), "threads": sorted({s["threads"] for s in after}),
            "ms_per_step_median": sorted(s["ms_per_step"] for s in samples[1:])[len(samples[1:]) // 2]
            if len(samples) > 1 else None,
            "samples": samples,
        }
    return out


def test_soak_memory_and_descriptors_stay_flat():
    steps = int(os.environ.get("SOAK_STEPS", "10000"))
    results = launch.scratch_dir("herring-soak-")
    run = launch.horovodrun(NP, [os.path.join("tests", "reliability", "workers", "soak_worker.py")], timeout=6 * 3600,
                            HERRING_TEST_RESULTS=results, SOAK_STEPS=steps,
                            SOAK_TENSORS=os.environ.get("SOAK_TENSORS", "200"),
                            SOAK_SAMPLE_EVERY=os.environ.get("SOAK_SAMPLE_EVERY", "500"))
    per_rank = launch.rank_results(results, NP)
    assert sorted(per_rank) == list(range(NP)), run.output[-4000:]
    summary = summarize(per_rank)
    report = {"np": NP, "steps": steps, "tensors": per_rank[0]["tensors"],
              "elements_per_step": per_rank[0]["elements_per_step"], "wall_seconds": round(run.seconds, 1),
              "counters_rank0": per_rank[0]["counters"], "ranks": summary}
    if os.environ.get("HERRING_SOAK_JSON"):
        with open(os.environ["HERRING_SOAK_JSON"], "w") as f:
            json.dump(report, f, indent=1)
    for r, s in summary.items():
        print(f"\nrank {r}: {s['steps']} steps in {s['seconds']} s, RSS {s['rss_mb_first']} -> {s['rss_mb_baseline']}"
              f" (step {WARMUP_STEPS}) -> {s['rss_mb_last']} MiB, max +{s['rss_mb_max_over_baseline']} MiB after warm-up,"
              f" fds {s['fds']}, threads {s['threads']}")
    assert run.returncode == 0, run.output[-4000:]
    for r, s in summary.items():
        assert s["error"] is None and s["wrong"] == 0, per_rank[r]["wrong"][:5] or s["error"]
        assert s["steps"] == steps, s
        assert s["rss_mb_max_over_baseline"] * 1024 <= RSS_TOLERANCE_KB, f"rank {r}: memory grows: {s}"
        assert len(s["fds"]) == 1, f"rank {r}: open file descriptors change: {s['fds']}"
        assert len(s["threads"]) == 1, f"rank {r}: threads change: {s['threads']}"
