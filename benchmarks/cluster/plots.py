"""PNG plots of the simulated-cluster benchmarks (matplotlib, no display). Each function writes one
file from the analysis (benchmarks/cluster/analysis.py) and returns its path, or None when the run
has nothing for it."""


import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from benchmarks.common.figures import save_figure  # noqa: E402
from benchmarks.common.formatting import fmt_bytes  # noqa: E402

LAUNCH_COLORS = {"herring-dedicated": "#d62728", "ring": "#ff9896", "herring-colocated": "#9467bd",
                 "herring-colocated-2": "#c5b0d5", "ring-2": "#ffbb78"}
LAUNCH_NAMES = {"herring-dedicated": "herring, 4 dedicated\nserver hosts", "ring": "ring",
                "herring-colocated": "herring, colocated", "herring-colocated-2": "herring, colocated\n2 ranks/host",
                "ring-2": "ring, 2 ranks/host"}


def _label(launch, cluster=None):
    name = LAUNCH_NAMES.get(launch, launch)
    if cluster and launch == "herring-dedicated":
        name = name.replace("4", str(cluster["servers"]), 1)
    return name


def goal_allreduce(goal, path):
    rows = [r for r in goal["rows"] if r["task"] == "allreduce" and not r["tuned"]]
    if not rows:
        return None
    sizes = sorted({r["bytes"] for r in rows})
    launches = [l for l in LAUNCH_COLORS if any(r["launch"] == l for r in rows)]
    fig, (ax_t, ax_b) = plt.subplots(1, 2, figsize=(12.5, 4.8))
    width = 0.8 / max(1, len(launches))
    for k, launch in enumerate(launches):
        xs, ys, lo, hi, bounds, fracs = [], [], [], [], [], []
        for i, s in enumerate(sizes):
            r = next((r for r in rows if r["launch"] == launch and r["bytes"] == s), None)
            if r is None:
                continue
            xs.append(i + (k - (len(launches) - 1) / 2) * width)
            ys.append(r["median"])
            lo.append(r["median"] - r["p25"])
            hi.append(r["p75"] - r["median"])
            bounds.append(r["bound"])
            fracs.append(100 * r["of_bound"])
        ax_t.bar(xs, ys, width, yerr=[lo, hi], capsize=2, color=LAUNCH_COLORS[launch], edgecolor="black",
                 linewidth=0.5, label=_label(launch, goal["cluster"]))
        ax_t.hlines(bounds, [x - width / 2 for x in xs], [x + width / 2 for x in xs], colors="black",
                    linestyles="--", linewidth=1.2)
        ax_b.bar(xs, fracs, width, color=LAUNCH_COLORS[launch], edgecolor="black", linewidth=0.5,
                 label=_label(launch, goal["cluster"]))
    for ax in (ax_t, ax_b):
        ax.set_xticks(range(len(sizes)))
        ax.set_xticklabels([fmt_bytes(s) for s in sizes])
        ax.set_xlabel("float32 allreduce per rank")
        ax.grid(True, axis="y", alpha=0.3)
    ax_t.set_ylabel("median time (s), slowest rank (bars: quartiles)")
    ax_t.set_title("allreduce time; dashed: each algorithm's link bound")
    ax_b.axhline(100, color="black", lw=1)
    ax_b.axhline(90, color="black", lw=0.8, ls=":")
    ax_b.set_ylabel("% of the algorithm's own link bound")
    ax_b.set_title("how close to the links' limit")
    ax_t.legend(fontsize=8)
    return save_figure(fig, path)


def goal_gradsets(goal, path):
    rows = [r for r in goal["rows"] if r["workload"] == "gradset" and not r["tuned"]]
    if not rows:
        return None
    models = sorted({r["model"] for r in rows}, key=lambda m: min(r["bytes"] for r in rows if r["model"] == m))
    fig, axes = plt.subplots(1, len(models), figsize=(4.6 * len(models), 4.4), squeeze=False)
    for ax, model in zip(axes[0], models):
        rs = [r for r in rows if r["model"] == model]
        rs.sort(key=lambda r: list(LAUNCH_COLORS).index(r["launch"]) if r["launch"] in LAUNCH_COLORS else 99)
        ax.bar(range(len(rs)), [r["median"] for r in rs], color=[LAUNCH_COLORS.get(r["launch"]) for r in rs],
               edgecolor="black", linewidth=0.5)
        ax.hlines([r["bound"] for r in rs], [i - 0.4 for i in range(len(rs))], [i + 0.4 for i in range(len(rs))],
                  colors="black", linestyles="--", linewidth=1.2)
        ax.set_xticks(range(len(rs)))
        ax.set_xticklabels([_label(r["launch"], goal["cluster"]) for r in rs], fontsize=8, rotation=20, ha="right")
        ax.set_title(f"{model} gradients ({fmt_bytes(rs[0]['bytes'])}), one step", fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
    axes[0][0].set_ylabel("median step (s); dashed: link bound")
    return save_figure(fig, path)


def goal_links(data, goal, path):
    """Send and receive rate of every host's link during the median iteration of the largest
    allreduce, for herring with dedicated servers and for the ring."""
    sc = next(s for s in data["scenarios"] if s["id"] == "goal")
    panels = []
    for lid in ("herring-dedicated", "ring"):
        launch = next((l for l in sc["launches"] if l["id"] == lid), None)
        recs = [r for r in (launch or {}).get("records", []) if r["kind"] == "allreduce" and r.get("links")]
        if recs:
            panels.append((lid, max(recs, key=lambda r: r["bytes"])))
    if not panels:
        return None
    roles = {h["name"]: h["role"] for h in sc["spec"]["hosts"]}
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.4), squeeze=False, sharey=True)
    for ax, (lid, rec) in zip(axes[0], panels):
        tr = rec["links"]["trace"]
        a, b = rec["links"]["trace_window"]
        for name, series in tr["hosts"].items():
            if not any(series["sent_bps"]) and not any(series["received_bps"]):
                continue
            color = "#d62728" if roles[name] == "worker" else "#1f77b4"
            ax.plot(tr["t"], [x / 1e9 for x in series["sent_bps"]], color=color, lw=0.9, alpha=0.8)
            ax.plot(tr["t"], [x / 1e9 for x in series["received_bps"]], color=color, lw=0.9, alpha=0.8, ls=":")
        ax.axvspan(a, b, color="grey", alpha=0.12)
        rate = goal["cluster"]["worker_rate"] / 1e9
        ax.axhline(rate, color="black", lw=1, ls="--")
        ax.set_title(f"{_label(lid, goal['cluster']).replace(chr(10), ' ')}: {fmt_bytes(rec['bytes'])}, "
                     f"median iteration (shaded)", fontsize=10)
        ax.set_xlabel("seconds")
        ax.grid(True, alpha=0.3)
    axes[0][0].set_ylabel("Gbit/s on the wire (solid: sent, dotted: received)")
    axes[0][0].plot([], [], color="#d62728", label="worker hosts")
    axes[0][0].plot([], [], color="#1f77b4", label="server hosts")
    axes[0][0].plot([], [], color="black", ls="--", label="configured link rate")
    axes[0][0].legend(fontsize=8, loc="lower center")
    return save_figure(fig, path)


def r2sp(r, path):
    ls = r.get("launches") or []
    if not ls:
        return None
    fig, (ax_s, ax_b) = plt.subplots(1, 2, figsize=(12, 4.4), gridspec_kw={"width_ratios": [2, 1]})
    colors = {"all": "#1f77b4", "r2sp": "#d62728", "r2sp-mode": "#2ca02c"}
    for x in ls:
        label = ("R2SP training mode" if x["schedule"] == "r2sp-mode" else f"HERRING_SCHEDULE={x['schedule']}")
        ax_s.plot(range(1, len(x["step_times"]) + 1), x["step_times"], "o-", ms=3, color=colors.get(x["schedule"]),
                  label=label)
    ax_s.set_xlabel("step")
    ax_s.set_ylabel("step time (s)")
    ax_s.set_title("communication-heavy training loop, every step")
    ax_s.legend(fontsize=8)
    ax_s.grid(True, alpha=0.3)
    ax_b.bar(range(len(ls)), [x["median"] for x in ls], color=[colors.get(x["schedule"]) for x in ls],
             edgecolor="black", linewidth=0.5)
    ax_b.hlines([x["bound"] for x in ls], [i - 0.4 for i in range(len(ls))], [i + 0.4 for i in range(len(ls))],
                colors="black", linestyles="--")
    ax_b.set_xticks(range(len(ls)))
    ax_b.set_xticklabels([x["schedule"] for x in ls])
    ax_b.set_title("median step (dashed: link bound)")
    ax_b.grid(True, axis="y", alpha=0.3)
    return save_figure(fig, path)


def hetero(rows, path):
    if not rows:
        return None
    fig, (ax_b, ax_s) = plt.subplots(1, 2, figsize=(12, 4.4))
    width = 0.38
    for i, r in enumerate(rows):
        ax_b.bar(i - width / 2, r["equal_throughput"], width, color="#1f77b4", edgecolor="black", linewidth=0.5,
                 label="equal batch split" if i == 0 else None)
        ax_b.bar(i + width / 2, r["tuned_throughput"], width, color="#d62728", edgecolor="black", linewidth=0.5,
                 label="hvd.BatchSizeTuner" if i == 0 else None)
        ax_b.text(i + width / 2, r["tuned_throughput"], f"{r['gain']:.2f}x", ha="center", va="bottom", fontsize=8)
        slow = r["slow_ranks"][0]
        ax_s.plot(range(1, len(r["tuned_sizes"]) + 1), [s[slow] for s in r["tuned_sizes"]], "-",
                  label=f"slow rank, {r['slow_factor']:g}x slower")
        ax_s.plot(range(1, len(r["tuned_sizes"]) + 1), [s[0] for s in r["tuned_sizes"]], ":",
                  label=f"a normal rank ({r['slow_factor']:g}x case)")
    ax_b.set_xticks(range(len(rows)))
    ax_b.set_xticklabels([f"one worker {r['slow_factor']:g}x slower" for r in rows])
    ax_b.set_ylabel("samples/s (median step, steady state)")
    ax_b.set_title("throughput")
    ax_b.legend(fontsize=8)
    ax_b.grid(True, axis="y", alpha=0.3)
    ax_s.set_xlabel("step (tuned phase)")
    ax_s.set_ylabel("local batch size")
    ax_s.set_title("batch sizes chosen by the tuner")
    ax_s.legend(fontsize=8)
    ax_s.grid(True, alpha=0.3)
    return save_figure(fig, path)


def psld(p, path, title):
    ls = p.get("launches") or {}
    if not ls:
        return None
    fig, (ax_s, ax_h) = plt.subplots(1, 2, figsize=(12.5, 4.6))
    colors = {"static": "#1f77b4", "psld": "#d62728"}
    for lid, x in ls.items():
        ax_s.plot(range(1, len(x["step_times"]) + 1), x["step_times"], "o-", ms=2.5, color=colors.get(lid),
                  label=x["label"])
    dyn = ls.get("psld")
    if dyn and dyn.get("settled_step") is not None:
        ax_s.axvline(dyn["settled_step"] + 1, color="#d62728", ls=":", lw=1)
    ax_s.set_yscale("log")
    ax_s.set_xlabel("step")
    ax_s.set_ylabel("step time (s)")
    ax_s.set_title(title, fontsize=10)
    ax_s.legend(fontsize=8)
    ax_s.grid(True, which="both", alpha=0.3)
    if dyn and dyn.get("final_shares"):
        rec_shares = dyn["slow_shares"]
        ax_h.plot(range(1, len(rec_shares) + 1), rec_shares, "-", color="#d62728", label="slow server's share (psld)")
        if ls.get("static"):
            st = ls["static"]["slow_shares"]
            ax_h.plot(range(1, len(st) + 1), st, "-", color="#1f77b4", label="slow server's share (static)")
        if p.get("ideal_slow_share"):
            ax_h.axhline(p["ideal_slow_share"], color="black", ls="--", lw=1,
                         label="share in proportion to measured link rates")
        ax_h.set_xlabel("step")
        ax_h.set_ylabel("share of every balanced buffer")
        ax_h.set_ylim(0, max(0.3, max(x for x in rec_shares if x is not None) * 1.1))
        ax_h.set_title("the partition map, after every step", fontsize=10)
        ax_h.legend(fontsize=8)
        ax_h.grid(True, alpha=0.3)
    return save_figure(fig, path)


def latency(data, lat, path):
    """Distribution (CDF) of the per-iteration times of each small allreduce, with the TCP round
    trip measured in the same run and the goal's 3x of it."""
    sc = next((s for s in data["scenarios"] if s["id"] == "latency"), None)
    if not sc or not lat["rows"]:
        return None
    fig, ax = plt.subplots(figsize=(9, 4.8))
    styles = {1: "-", 2: "--"}
    colors = ["#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e"]
    sizes = sorted({r["bytes"] for r in lat["rows"]})
    for launch in sc["launches"]:
        slots = launch.get("slots_per_host") or 1
        for rec in launch["records"]:
            if rec["kind"] != "allreduce":
                continue
            xs = sorted(t * 1e6 for t in rec["times"])
            ys = [(i + 1) / len(xs) for i in range(len(xs))]
            ax.step(xs, ys, where="post", ls=styles.get(slots, ":"), color=colors[sizes.index(rec["bytes"]) % 5],
                    label=f"{fmt_bytes(rec['bytes'])}, {slots} rank{'s' if slots > 1 else ''}/host (np={rec['np']})")
    for m in sc.get("rtt") or []:
        for x in m["sizes"]:
            if x["bytes"] == 1:
                xs = [x[k] * 1e6 for k in ("min", "p10", "p25", "median", "p75", "p90", "p99")]
                ys = [0, 0.10, 0.25, 0.5, 0.75, 0.90, 0.99]
                ax.plot(xs, ys, "o-" if m.get("when") == "before" else "s:", color="black", ms=3, lw=1,
                        label=f"TCP round trip, 1 B ({m.get('when')})")
    ref = lat["rtt"].get(1) or lat["rtt"].get("1")
    if ref:
        ax.axvline(3 * ref["rtt"] * 1e6, color="black", lw=1, ls="-.", label="goal: 3x the round trip")
    ax.set_xscale("log")
    ax.set_xlabel("time per allreduce, slowest rank (µs, log scale)")
    ax.set_ylabel("fraction of iterations")
    ax.set_title("small allreduces across 2 hosts (1 Gbit/s tbf) vs the TCP round trip")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    return save_figure(fig, path)
