"""The latency report (docs/benchmarks_latency.md and its plots) from a run of the `latency` preset:
one allreduce at a time after a barrier, 4 KiB to 16 MiB, and the 1000-tiny-tensors step, for
herring (with every cycle on its loop thread, the `loop-only` variant, and its first-round
control plane, the `tcp-control` variant) beside torch-gloo,
Horovod-gloo, Open MPI and (allreduce only) DeepSpeed's shared-memory allreduce, the SyncBatchNorm-bound training step (herring beside DDP on gloo), with
the latency goals' verdicts.

    .venv/bin/python -m benchmarks.single_host.run --preset latency --out docs/benchmarks_latency.md \\
        --results benchmarks/results/latency.json
    .venv/bin/python -m benchmarks.single_host.latency_report benchmarks/results/latency.json   # report only"""

import os
import statistics

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from benchmarks.common import pages  # noqa: E402
from benchmarks.common.formatting import fmt_bytes, fmt_time  # noqa: E402
from benchmarks.single_host import peer_goal  # noqa: E402
from benchmarks.single_host.plots import COLORS, one_at_a_time_latency  # noqa: E402
from benchmarks.single_host.results import Results  # noqa: E402

KiB, MiB = 1 << 10, 1 << 20
# The latency issue's no-regression goals at a large size (the `allreduce-large` workload).
LARGE_SIZE, LARGE_NP = 64 * MiB, 4
LARGE_GLOO_GOAL, LARGE_BOUND_GOAL = 5.0, 1.4
# (label, stack, variant) in the tables' column order.
COLUMNS = [("herring", "herring", ""), ("herring, cycles on the loop thread (loop-only)", "herring", "loop-only"),
           ("herring, first round (tcp-control)", "herring", "tcp-control"), ("torch-gloo", "torch-gloo", ""),
           ("horovod-gloo", "horovod-gloo", ""), ("Open MPI", "mpi", ""), ("DeepSpeed shm", "deepspeed-shm", "")]


def medians(data, workload):
    """{(stack, variant, np, bytes): median seconds}, pooled over repeats."""
    pooled = {}
    for r in data["records"]:
        if r.get("workload") == workload and "median" in r:
            pooled.setdefault((r["stack"], r.get("variant", ""), r["np"], r.get("bytes")), []).append(r["median"])
    return {k: statistics.median(v) for k, v in pooled.items()}


def columns_of(*results):
    """The COLUMNS a run has records of in any of these medians() tables (a run from before a stack
    existed shows no empty column for it; a stack with records elsewhere keeps its column)."""
    return [c for c in COLUMNS if c[0] == "herring" or any(k[:2] == c[1:] for r in results for k in r)]


def latency_table(lat, np, sizes, columns=None):
    columns = columns or columns_of(lat)
    rows = ["| Size | " + " | ".join(label for label, _, _ in columns) + " |",
            "| --- |" + " --- |" * len(columns)]
    for size in sizes:
        ours = lat.get(("herring", "", np, size))
        cells = []
        for _, stack, variant in columns:
            t = lat.get((stack, variant, np, size))
            if t is None:
                cells.append("-")
            elif ours and (stack, variant) != ("herring", ""):
                cells.append(f"{fmt_time(t)} ({t / ours:.2f}x)")
            else:
                cells.append(fmt_time(t))
        rows.append(f"| {fmt_bytes(size)} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def plot(lat, nps, sizes, path):
    def lines_at(np):
        return [(label, {s: lat[(stack, variant, np, s)] for s in sizes if (stack, variant, np, s) in lat},
                 {"color": COLORS.get(stack), "linestyle": "--" if variant else "-"})
                for label, stack, variant in COLUMNS]
    one_at_a_time_latency(nps, sizes, lines_at, path)


def verdict(measured, target, higher_is_better):
    if measured is None:
        return "-", "not measured"
    ok = measured >= target if higher_is_better else measured <= target
    return measured, "met" if ok else "not met"


def by_np(results, stack):
    """{np: median} of one stack's records in a medians() table (one record size per workload)."""
    return {k[2]: t for k, t in results.items() if k[0] == stack and k[1] == ""}


def goals(lat, tiny, syncbn, large, bound, nps, sizes):
    rows = ["| Goal | Target | Measured | Verdict |", "| --- | --- | --- | --- |"]

    def add(goal, target, measured, shown, higher_is_better):
        _, v = verdict(measured, target, higher_is_better)
        rows.append(f"| {goal} | {'>=' if higher_is_better else '<='} {target if higher_is_better else shown(target)} "
                    f"| {shown(measured) if measured is not None else '-'} | {v} |")

    for np, target in ((2, 30e-6), (4, 60e-6)):
        add(f"4 KiB allreduce, one host, np={np}: herring median", target, lat.get(("herring", "", np, 4 * KiB)),
            fmt_time, False)
    for np in nps:
        ratios = [lat[("torch-gloo", "", np, s)] / lat[("herring", "", np, s)] for s in sizes
                  if ("torch-gloo", "", np, s) in lat and ("herring", "", np, s) in lat]
        add(f"faster than torch-gloo at every size measured, np={np} (slowest ratio)", 1.0,
            min(ratios) if ratios else None, lambda x: f"{x:.2f}x", True)
        ratios = [lat[("mpi", "", np, s)] / lat[("herring", "", np, s)] for s in sizes
                  if s >= MiB and ("mpi", "", np, s) in lat and ("herring", "", np, s) in lat]
        add(f"within 2x of Open MPI from 1 MiB, np={np} (herring's speed / MPI's, lowest)", 0.5,
            min(ratios) if ratios else None, lambda x: f"{x:.2f}x", True)
        peer, ours = tiny.get(("horovod-gloo", "", np, 4)), tiny.get(("herring", "", np, 4))
        add(f"1000 tiny tensors per step, np={np}: herring faster than horovod-gloo", 3.0,
            peer / ours if peer and ours else None, lambda x: f"{x:.2f}x", True)
    peer, ours = by_np(syncbn, "torch-gloo"), by_np(syncbn, "herring")
    for np in sorted(set(peer) & set(ours)):
        add(f"SyncBatchNorm-bound training step, np={np}: hvd.SyncBatchNorm on herring faster than DDP with "
            "nn.SyncBatchNorm's algorithm on gloo", 2.0, peer[np] / ours[np], lambda x: f"{x:.2f}x", True)
    rows += large_goals(large, bound)
    return "\n".join(rows)


def large_goals(large, bound):
    """The no-regression rows: 64 MiB at np=4 against torch-gloo and the memory-traffic bound."""
    rows = []
    ours, gloo = large.get(("herring", "", LARGE_NP, LARGE_SIZE)), large.get(("torch-gloo", "", LARGE_NP, LARGE_SIZE))
    what = f"{fmt_bytes(LARGE_SIZE)} allreduce, np={LARGE_NP}"
    if ours and gloo:
        ratio = gloo / ours
        rows.append(f"| {what}: herring faster than torch-gloo | >= {LARGE_GLOO_GOAL:g}x | {ratio:.2f}x "
                    f"(torch-gloo {fmt_time(gloo)}, herring {fmt_time(ours)}) | "
                    f"{verdict(ratio, LARGE_GLOO_GOAL, True)[1]} |")
    for stack, who in (("herring", "ordinary tensors"), ("herring-zero-copy", "buffers in zero-copy memory")):
        mine = large.get((stack, "", LARGE_NP, LARGE_SIZE))
        if mine and bound:
            ratio = mine / bound
            rows.append(f"| {what}: herring, {who}, within {LARGE_BOUND_GOAL:g}x of the memory-traffic bound "
                        f"| <= {LARGE_BOUND_GOAL:g}x | {ratio:.2f}x ({fmt_time(mine)}, bound {fmt_time(bound)}) | "
                        f"{verdict(ratio, LARGE_BOUND_GOAL, False)[1]} |")
    return rows


def syncbn_part(data, syncbn, doc_dir, img_dir):
    """The SyncBatchNorm step's table and plot."""
    peer, ours = by_np(syncbn, "torch-gloo"), by_np(syncbn, "herring")
    rec = next(r for r in data["records"] if r.get("workload") == "syncbn" and "median" in r)
    nps = sorted(set(peer) | set(ours))
    img = os.path.join(img_dir, "latency_syncbn.png")
    fig, ax = plt.subplots(figsize=(6, 4))
    width = 0.38
    for i, (label, stack, times) in enumerate((("herring: hvd.SyncBatchNorm", "herring", ours),
                                               ("torch-gloo: DDP + SyncBatchNorm", "torch-gloo", peer))):
        xs = [j + (i - 0.5) * width for j, np in enumerate(nps) if np in times]
        ax.bar(xs, [times[np] * 1e3 for np in nps if np in times], width, label=label, color=COLORS.get(stack))
    ax.set_xticks(range(len(nps)))
    ax.set_xticklabels([f"np={np}" for np in nps])
    ax.set_ylabel("median step time (ms)")
    ax.set_title(f"SyncBatchNorm-bound step ({rec['model']}, batch {rec['batch']} per rank)")
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    os.makedirs(os.path.dirname(img), exist_ok=True)
    fig.tight_layout()
    fig.savefig(img, dpi=110)
    plt.close(fig)
    rows = ["### SyncBatchNorm-bound training step\n",
            f"A small convolutional net ({rec['model']}: three 3x3 convolutions, each followed by the stack's "
            f"synchronized batch norm and a ReLU; {rec['params']} parameters) on {rec['batch']} images of "
            f"{rec['image']}x{rec['image']} per rank; a step is forward, backward and SGD. herring runs "
            "`hvd.SyncBatchNorm` under Horovod's DistributedOptimizer; torch-gloo runs DDP with the algorithm of "
            "`nn.SyncBatchNorm` (one all_gather_into_tensor forward and one all_reduce backward per layer: torch's "
            "module itself refuses CPU tensors) on the same CPU batch-norm primitives. Median step time.\n",
            "| np | herring | torch-gloo (DDP) | gloo / herring |", "| --- | --- | --- | --- |"]
    for np in nps:
        h, g = ours.get(np), peer.get(np)
        rows.append(f"| {np} | {fmt_time(h) if h else '-'} | {fmt_time(g) if g else '-'} | "
                    f"{f'{g / h:.2f}x' if h and g else '-'} |")
    rows += ["", f"![SyncBatchNorm step]({os.path.relpath(img, doc_dir)})\n"]
    return rows


def section(data, doc_dir, img_dir):
    """The goals, the tables and the plot as markdown (for docs/benchmarks_latency.md and, through
    benchmarks/single_host/report.py, for docs/benchmarks.md); image links relative to doc_dir."""
    lat, tiny, syncbn = medians(data, "allreduce"), medians(data, "tiny"), medians(data, "syncbn")
    res = Results(data)
    large, bound = medians(data, "allreduce-large"), res.memory_bound(LARGE_SIZE, LARGE_NP)
    warmup_iters, warmup_seconds = res.warmup("allreduce")
    warmup = (f"Every size first warms up for {warmup_seconds:g} s (at least {warmup_iters} iterations): the first "
              "~0.1 s of a job's small collectives ran at about twice the steady state on this machine, on "
              "whichever size came first. " if warmup_seconds else
              f"Every size first runs {warmup_iters if warmup_iters is not None else 'some'} warm-up iterations. ")
    nps = sorted({k[2] for k in lat})
    sizes = sorted({k[3] for k in lat})
    img = os.path.join(img_dir, "latency_allreduce.png")
    if lat:  # a run of some workloads only (--workloads) may have no allreduce
        plot(lat, nps, sizes, img)
    m, meta = data["machine"], data["meta"]
    parts = [
        f"From `{meta['command']}` on {m.get('date', '?')}, {m.get('cpu', '?')} with {m.get('cores', '?')} cores "
        f"(load average {m.get('load_average_start')} at the "
        f"start, {m.get('load_average_end')} at the end; raw results `{meta.get('results_path')}`).\n",
        "Each iteration: a barrier, then one float32 sum-allreduce in place, timed on every rank; the time of an "
        "iteration is the slowest rank's, the tables show the median over the iterations. The max that "
        "takes the slowest rank's time runs on a buffer allocated once and reduced in place, on every stack: "
        "with more ranks than cores, what a rank's core-mate runs before its next wait falls inside the "
        "rank's timed region (benchmarks/workers/comms.py gives the measurement). " + warmup +
        "`herring, first round` is the same engine with `HERRING_CONTROL_PLANE=tcp "
        "HERRING_SMALL_MESSAGE_BYTES=0` (bit vectors through rank 0 over TCP, staged two-step shared-memory reduction): the path of the first round, in the same run. "
        "`loop-only` is the same engine with `HERRING_CALLER_RUNS_CYCLES=0`: every cycle runs on the engine's "
        "loop thread, which the waiting thread wakes and then sleeps until it is done. "
        + ("`DeepSpeed shm` is `deepspeed.comm.inference_all_reduce` on DeepSpeed's shared-memory op "
           "(docs/benchmarks_peers.md says how it works). " if any(k[0] == "deepspeed-shm" for k in lat) else "") +
        "Ratios are the stack's time over herring's (above 1: herring is faster). The last rows of the goal "
        "table are the large-size check of the same run: 64 MiB at np=4 (workload `allreduce-large`), "
        "against torch-gloo and against the memory-traffic bound measured in the run (docs/benchmarks.md "
        "derives it), with ordinary tensors and with buffers in herring's zero-copy memory. The bound comes from "
        "memcpy's rate measured once, at the run's start; a ratio below 1 means a path moved its bytes faster "
        "than memcpy did then (the machine itself changes between runs: the full preset measured the same "
        "zero-copy allreduce at 9.0 ms against a 12.5 ms bound on an AMD EPYC and at 14.2 ms against 10.8 ms "
        "on an Intel Xeon).\n",
        "### Latency goals\n", goals(lat, tiny, syncbn, large, bound, nps, sizes), "",
        "### At or ahead of every peer\n",
        peer_goal.table({(k[0], k[2], k[3]): t for k, t in lat.items() if k[1] == ""}, nps, sizes),
    ]
    for np in nps:
        parts += [f"### Allreduce, np={np}\n", latency_table(lat, np, sizes, columns_of(lat, tiny)), ""]
    if lat:
        parts.append(f"![latency]({os.path.relpath(img, doc_dir)})\n")
    if tiny:
        count = next((r.get("count") for r in data["records"] if r.get("workload") == "tiny"), "?")
        parts += [f"### {count} tiny tensors per step\n",
                  "Every tensor (one float32, its own name) submitted asynchronously, then all awaited; the median "
                  "step time.\n", "| np | " + " | ".join(l for l, _, _ in columns_of(lat, tiny)) + " |",
                  "| --- |" + " --- |" * len(columns_of(lat, tiny))]
        for np in sorted({k[2] for k in tiny}):
            ours = tiny.get(("herring", "", np, 4))
            cells = []
            for _, stack, variant in columns_of(lat, tiny):
                t = tiny.get((stack, variant, np, 4))
                shown_ratio = ours and (stack, variant) != ("herring", "")
                cells.append("-" if t is None else fmt_time(t) + (f" ({t / ours:.2f}x)" if shown_ratio else ""))
            parts.append(f"| {np} | " + " | ".join(cells) + " |")
        parts.append("")
    if syncbn:
        parts += syncbn_part(data, syncbn, doc_dir, img_dir)
    return pages.with_failed_launches(
        parts, data["launches"], lambda l: f"{l['stack']} {l['variant'] or ''} np={l['np']}: {(l.get('errors') or ['?'])[0]}")


if __name__ == "__main__":
    pages.report_main(None, __doc__, "latency", "benchmarks_latency.md", "Latency: small collectives, one host", section)
