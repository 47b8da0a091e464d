"""The scale suite's plots: the measured figures against N (one line per design and the peer), and
the model's predictions at 1k-16k ranks."""

from benchmarks.common.figures import save_figure, plt
from benchmarks.scale import model

SERIES = [("herring", "today", "herring, today's design", "tab:red", "o"),
          ("herring", "hierarchical", "herring, hierarchical", "tab:blue", "s"),
          ("horovod-gloo", "peer", "Horovod-gloo", "tab:gray", "^"),
          ("calibration-one-host", "defaults", "herring, all ranks on one host", "tab:green", "x")]

PANELS = [("tiny_cycle_seconds", 1e3, "tiny allreduce cycle (ms)", True),
          ("init_seconds", 1, "launch -> every init returned (s)", True),
          ("big_seconds", 1, "large allreduce, in place (s)", True),
          ("tcp_per_rank", 1, "TCP sockets per rank", True),
          ("rss_per_rank_bytes", 1 / 2**20, "RSS per rank (MiB)", False)]


def _value(fig, key):
    v = fig.get(key)
    return v["median"] if isinstance(v, dict) else v


def plot_measured(results, path):
    fig, axes = plt.subplots(1, len(PANELS), figsize=(4.2 * len(PANELS), 3.8))
    for ax, (key, scale, title, log) in zip(axes, PANELS):
        for kind, design, label, color, marker in SERIES:
            pts = sorted((j["n"], _value(j["figures"], key) * scale) for j in results["jobs"]
                         if j["kind"] == kind and j["design"] == design and j["status"] == "ok"
                         and _value(j.get("figures", {}), key) is not None)
            if pts:
                ax.plot(*zip(*pts), marker=marker, color=color, label=label)
        ax.set_xscale("log", base=2)
        if log:
            ax.set_yscale("log")
        ax.set_xlabel("ranks (N)")
        ax.set_title(title, fontsize=10)
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"Scale suite on {results['preset']['hosts']} simulated hosts, 2 cores (oversubscribed; "
                 f"load average {results.get('load_average_start', ['?'])[0]} at start)", fontsize=10)
    return save_figure(fig, path)


def plot_model(params, path):
    preds = model.predictions(params)
    keys = [("tiny_cycle_seconds", 1e6, "tiny allreduce cycle (us)"), ("init_seconds", 1, "time to init (s)"),
            ("tcp_per_rank", 1, "TCP sockets per rank"), ("big_seconds", 1e3, "64 MiB allreduce (ms)")]
    fig, axes = plt.subplots(1, len(keys), figsize=(4.2 * len(keys), 3.8))
    for ax, (key, scale, title) in zip(axes, keys):
        for design, color in (("today", "tab:red"), ("hierarchical", "tab:blue")):
            for link, style in zip(model.LINKS_BPS, ("-", "--")):
                pts = [(r["n"], r[key] * scale) for r in preds if r["design"] == design and r["link_bps"] == link]
                if key != "big_seconds" and link != model.LINKS_BPS[0]:
                    continue            # only the large allreduce depends on the link
                ax.plot(*zip(*pts), style, marker="o", color=color,
                        label=f"{design}" + (f", {link / 1e9:.0f} Gbit/s" if key == "big_seconds" else ""))
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(f"ranks ({model.RANKS_PER_HOST_AT_SCALE} per host)")
        ax.set_title(title, fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("Model predictions (calibrated on this machine's runs; one core per rank)", fontsize=10)
    return save_figure(fig, path)
