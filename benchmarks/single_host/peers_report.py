"""The every-peer report (docs/benchmarks_peers.md and its plot) from a run of the `peers` preset:
one float32 allreduce at a time after a barrier, 4 KiB to 64 MiB at np=2 and np=4, herring beside
torch-gloo, Horovod-gloo, Open MPI and DeepSpeed's shared-memory allreduce, with issue 27's goal per
size (herring at or ahead of every peer; within 2x of Open MPI at 4 KiB).

    .venv/bin/python -m benchmarks.single_host.run --preset peers --out /tmp/peers/benchmarks.md \\
        --results benchmarks/results/peers.json
    .venv/bin/python -m benchmarks.single_host.peers_report benchmarks/results/peers.json   # the page"""

import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from benchmarks.common import pages  # noqa: E402
from benchmarks.common.formatting import fmt_bytes, fmt_time  # noqa: E402
from benchmarks.single_host import peer_goal  # noqa: E402
from benchmarks.single_host.plan import PEERS  # noqa: E402
from benchmarks.single_host.plots import COLORS, one_at_a_time_latency  # noqa: E402
from benchmarks.single_host.results import Results  # noqa: E402
from benchmarks.single_host.stacks import STACKS  # noqa: E402

DEEPSPEED_NOTE = (
    "How DeepSpeed's op works (csrc/cpu/comm/shm.cpp of deepspeed 0.19.8), for reading its column: every "
    "rank owns a 66 MiB shared-memory workspace that all ranks map at init. Below 1 MiB "
    "(`symmetric_naive_all_reduce`) a rank copies its input into its workspace, stores a state flag, "
    "spins until every other rank's flag shows the same round, and sums all N workspaces straight into "
    "its own tensor: one synchronization, no system call, no negotiation; between the caller and the "
    "kernel only deepspeed.comm's Python wrapper and torch's dispatcher. From 1 MiB "
    "(`distributed_naive_reduce`, 32 MiB chunks) a rank copies its input in, waits, sums its 1/N slice of all N workspaces into its own workspace, flags, waits "
    "for all, and copies every slice out: (5 + 1/N)·S of memory traffic per rank (herring's staging: (5 - 1/N)·S), "
    "but whole 32 MiB chunks per phase (nothing stays in the caches between the phases) and two "
    "all-rank waits per chunk. Every wait is a pure spin on a volatile flag (no pause, yield or futex): "
    "with more ranks than cores (np=4 on 2 cores) a spinning rank holds a core that a rank still "
    "copying needs, until the scheduler preempts it. Three round states and double buffers let ranks "
    "run one round apart without a barrier. It takes no name, dtype or shape negotiation, so ranks "
    "calling it with different tensors are not detected; it sums only (the op argument is ignored).")


def medians(data):
    """{(stack, np, bytes): median seconds} of the allreduce records (pooled over repeats)."""
    return peer_goal.medians_of(Results(data))


def table(med, np, sizes, stacks):
    rows = ["| Size | " + " | ".join(stacks) + " |", "| --- |" + " --- |" * len(stacks)]
    for size in sizes:
        if not any((st, np, size) in med for st in stacks):
            continue
        ours = med.get(("herring", np, size))
        cells = []
        for st in stacks:
            t = med.get((st, np, size))
            cells.append("-" if t is None else fmt_time(t) if st == "herring" or not ours
                         else f"{fmt_time(t)} ({t / ours:.2f}x)")
        rows.append(f"| {fmt_bytes(size)} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def plot(med, nps, sizes, stacks, path):
    def lines_at(np):
        return [(st, {s: med[(st, np, s)] for s in sizes if (st, np, s) in med}, {"color": COLORS.get(st)})
                for st in stacks]
    one_at_a_time_latency(nps, sizes, lines_at, path)


def round_trips(launches):
    """The core-to-core round trip around each launch (benchmarks/common/core_round_trip.py)."""
    measured = [l for l in launches if any(t is not None for t in l.get("core_round_trip_ns") or [])]
    if not measured:
        return []
    fmt = lambda t: "-" if t is None else f"{t:.0f}"   # noqa: E731
    rows = "\n".join(f"| {l['stack']} | {l['np']} | {l.get('repeat', 0)} | "
                     f"{' / '.join(fmt(t) for t in l['core_round_trip_ns'])} |" for l in measured)
    return ["### The machine around each launch\n",
            "A cache line's round trip between the first two CPUs, in ns, just before and just after each "
            "launch (benchmarks/workers/core_round_trip.c). A small shared-memory allreduce is a chain of "
            "such trips; on this virtual machine the trip moves between about 60, 125 and 500 ns from one "
            "second to the next as the hypervisor places its CPUs, and a loaded machine shows as thousands.\n",
            "| Stack | np | Repeat | Before / after (ns) |\n|---|---|---|---|\n" + rows + "\n"]


def per_launch(data, stacks=("herring", "mpi")):
    """Each launch's own median beside its core round trip: a pooled median can hide that one
    stack's launches met a slow placement of the CPUs and another's did not."""
    recs = [r for r in data["records"] if r.get("kind") == "allreduce" and r.get("stack") in stacks]
    if len({r.get("repeat", 0) for r in recs}) < 2:
        return []
    trip = {(l["stack"], l["np"], l.get("repeat", 0)): (l.get("core_round_trip_ns") or [None])[0]
            for l in data["launches"]}
    by_point = {}
    for r in sorted(recs, key=lambda r: r.get("repeat", 0)):
        ns = trip.get((r["stack"], r["np"], r.get("repeat", 0)))
        cell = fmt_time(r["median"]) + ("" if ns is None else f" ({ns:.0f} ns)")
        by_point.setdefault((r["np"], r["bytes"]), {}).setdefault(r["stack"], []).append(cell)
    rows = [f"| {np} | {fmt_bytes(size)} | " + " | ".join(" / ".join(cells.get(st, ["-"])) for st in stacks) + " |"
            for (np, size), cells in sorted(by_point.items())]
    return ["### Per launch\n",
            "Each launch's median, in round order, with the core-to-core round trip measured just before it "
            "(the table above): a launch that met the slow placement (about 500 ns) runs up to several times "
            "slower, so compare launches with like round trips before reading a pooled ratio.\n",
            "| np | Size | " + " | ".join(stacks) + " |\n|---|---|" + "---|" * len(stacks) + "\n" + "\n".join(rows) + "\n"]


def section(data, doc_dir, img_dir):
    med = medians(data)
    res = Results(data)
    nps = sorted({k[1] for k in med})
    sizes = sorted({k[2] for k in med})
    stacks = [s for s in ["herring"] + PEERS if any(k[0] == s for k in med)]
    m, meta = data["machine"], data["meta"]
    parts = [
        f"From `{meta['command']}` on {m.get('date', '?')}, {m.get('cpu', '?')} with {m.get('cores', '?')} cores, "
        f"deepspeed {m.get('versions', {}).get('deepspeed (peer)', '?')} (load average "
        f"{m.get('load_average_start')} at the start, {m.get('load_average_end')} at the end: the machine was shared "
        f"with other jobs, so times are noisy; raw results `{meta.get('results_path')}`).\n",
        "Each iteration: a barrier, then one float32 sum-allreduce in place, timed on every rank; an iteration "
        "counts until the slowest rank has its result; the tables show the median over the iterations (each size "
        f"warms up for {res.warmup('allreduce')[1]:g} s first). The stacks run one after another inside each rank "
        f"count, in the table's order, each through its own launcher, in {data['plan'].get('repeats', 1)} round(s); a "
        "median pools the iterations of all of a stack's launches. After the last iteration every element of "
        "the result is checked on every rank. Ratios are the peer's time over herring's (above 1: herring is "
        "faster).\n",
    ]
    load = (m.get("load_average_start") or [0])[0]
    if load > (m.get("cores") or 1):
        parts.append(f"**The machine was oversubscribed during this run (load {load:.1f} at the start on "
                     f"{m.get('cores')} cores, from other jobs): these times measure contention for the cores as "
                     "much as the stacks, and stacks that spin while waiting (Open MPI's shared-memory transport, "
                     "DeepSpeed's flags) suffer most. The verdicts below are this run's, not the goal's on an "
                     "idle machine.**\n")
    parts += ["### At or ahead of every peer\n", peer_goal.table(med, nps, sizes)]
    for np in nps:
        parts += [f"### Allreduce, np={np}\n", table(med, np, sizes, stacks), ""]
    if med:
        img = os.path.join(img_dir, "peers_allreduce.png")
        plot(med, nps, sizes, stacks, img)
        parts.append(f"![every peer]({os.path.relpath(img, doc_dir)})\n")
    parts += round_trips(data["launches"])
    parts += per_launch(data)
    parts += ["### How the peers run\n"] + [f"- **{s}**: {STACKS[s].description}" for s in stacks] + [""]
    if "deepspeed-shm" in stacks:
        parts += [DEEPSPEED_NOTE + "\n"]
    return pages.with_failed_launches(
        parts, data["launches"],
        lambda l: f"{l['stack']} np={l['np']}: {(l.get('error_lines') or [l.get('output_tail', '?')])[0][:300]}")


if __name__ == "__main__":
    pages.report_main(None, __doc__, "peers", "benchmarks_peers.md", "Every peer on one host: 4 KiB to 64 MiB", section)
