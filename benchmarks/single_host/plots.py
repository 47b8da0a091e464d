"""PNG plots of a single-host run (matplotlib, no display needed). Each function writes one file and returns its
path, or None when the run has nothing to plot for it."""


import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from benchmarks.common.figures import save_figure  # noqa: E402
from benchmarks.common.formatting import fmt_bytes  # noqa: E402
from benchmarks.single_host.results import BOUND_MIN_BYTES  # noqa: E402

COLORS = {"herring": "#d62728", "herring-ring": "#ff9896", "herring-zero-copy": "#8c1515", "torch-gloo": "#1f77b4",
          "ddp-herring": "#ff7f0e", "horovod-gloo": "#2ca02c", "mpi": "#9467bd",
          "deepspeed-shm": "#17becf"}


def allreduce(res, np, path):
    sizes = res.values("bytes", workload="allreduce", np=np)
    if not sizes:
        return None
    fig, (ax_t, ax_r) = plt.subplots(1, 2, figsize=(12, 4.6))
    for stack in res.stacks:
        pts = [(s, res.median("allreduce", stack, np, bytes=s)) for s in sizes]
        pts = [(s, t) for s, t in pts if t is not None]
        if not pts:
            continue
        ax_t.plot([s for s, _ in pts], [t for _, t in pts], "o-", color=COLORS.get(stack), label=stack)
        if stack != "herring":
            rat = [(s, t / res.median("allreduce", "herring", np, bytes=s)) for s, t in pts
                   if res.median("allreduce", "herring", np, bytes=s)]
            if rat:
                ax_r.plot([s for s, _ in rat], [r for _, r in rat], "o-", color=COLORS.get(stack), label=stack)
    bound = [(s, res.memory_bound(s, np)) for s in sizes if s >= BOUND_MIN_BYTES]
    if bound and all(b is not None for _, b in bound):
        ax_t.plot([s for s, _ in bound], [b for _, b in bound], "k--", label="memory-traffic bound")
    for ax in (ax_t, ax_r):
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes)
        ax.set_xticklabels([fmt_bytes(s) for s in sizes], rotation=45, ha="right")
        ax.grid(True, which="both", alpha=0.3)
        ax.set_xlabel("float32 buffer per rank")
    ax_t.set_yscale("log")
    ax_t.set_ylabel("median time (s), slowest rank")
    ax_t.set_title(f"allreduce, {np} ranks on one host")
    ax_r.set_yscale("log")
    ax_r.axhline(1.0, color=COLORS["herring"], lw=1)
    ax_r.set_ylabel("time / herring's time (above 1: herring faster)")
    ax_r.set_title("ratio to herring")
    ax_t.legend(fontsize=8)
    if ax_r.get_legend_handles_labels()[0]:
        ax_r.legend(fontsize=8)
    return save_figure(fig, path)


def bars(res, workload_ids, path, title, variants=("",)):
    """One panel per (workload, np), each with its own scale, one bar per stack (and variant); the
    dotted line is the compute-only step measured in the same launches, where there is one."""
    groups = [(wid, np) for wid in workload_ids for np in res.values("np", workload=wid)]
    series = [(s, v) for s in res.stacks for v in variants
              if any(res.median(w, s, n, v) is not None for w, n in groups)]
    if not groups or not series:
        return None
    fig, axes = plt.subplots(1, len(groups), figsize=(max(5.5, 3.4 * len(groups)), 4.4), squeeze=False)
    for ax, (wid, np) in zip(axes[0], groups):
        labels, ys, colors, hatches = [], [], [], []
        for stack, variant in series:
            t = res.median(wid, stack, np, variant)
            if t is None:
                continue
            labels.append(stack + (f"\n({variant})" if variant else ""))
            ys.append(t)
            colors.append(COLORS.get(stack))
            hatches.append("//" if variant else "")
        bars_ = ax.bar(range(len(ys)), ys, color=colors, edgecolor="black", linewidth=0.5)
        for b, h in zip(bars_, hatches):
            b.set_hatch(h)
        base = sorted(b for b in (res.baseline(wid, s, np) for s in res.stacks) if b is not None)
        if base:
            ax.axhline(base[len(base) // 2], color="k", linestyle=":", label="compute only")
            ax.legend(fontsize=8)
        ax.set_xticks(range(len(ys)))
        ax.set_xticklabels(labels, rotation=45, ha="right", fontsize=8)
        ax.set_title(f"{wid}, np={np}", fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
    axes[0][0].set_ylabel("median step time (s), slowest rank")
    fig.suptitle(title)
    return save_figure(fig, path)


def one_at_a_time_latency(nps, sizes, lines_at, path):
    """One panel per rank count of the median time per allreduce against its size, log-log.
    lines_at(np) gives that panel's lines: (label, {size: seconds}, matplotlib keyword arguments)."""
    fig, axes = plt.subplots(1, len(nps), figsize=(6 * len(nps), 4.4), squeeze=False)
    for ax, np in zip(axes[0], nps):
        for label, seconds, style in lines_at(np):
            points = [(s, seconds[s]) for s in sizes if s in seconds]
            if points:
                ax.plot([p[0] for p in points], [p[1] * 1e6 for p in points], marker="o", label=label, **style)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(sizes)
        ax.set_xticklabels([fmt_bytes(s) for s in sizes], rotation=30)
        ax.set_ylabel("median time per allreduce (µs)")
        ax.set_title(f"one allreduce at a time, np={np}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    save_figure(fig, path)
