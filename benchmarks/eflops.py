"""The EFLOPS benchmark (issue 6): ring vs halving-doubling vs topology-aware halving-doubling vs
the herring parameter-server allreduce, in a simulated two-group cluster whose traffic inside a
group shares one constrained link while every pair of hosts across the groups has a direct link
(BiGraph). Every stack runs the same allreduce sizes in the same cluster, launched by the real
horovodrun over ssh; the results are checked on every rank (benchmarks/workers/bench_worker.py).

    .venv/bin/python -m benchmarks.eflops             # docs/eflops.json, docs/img/eflops_allreduce.png,
                                                      # and the results section of docs/eflops.md
    .venv/bin/python -m benchmarks.eflops --nps 4 --sizes 1048576 --out /tmp/e/eflops.json --no-doc
    .venv/bin/python -m benchmarks.eflops --report docs/eflops.json   # plot + section from saved results

Beside the measured medians it reports what a bottleneck model of the same links predicts for
each algorithm (each step of an algorithm is a set of concurrent flows; a step lasts as long as its
most loaded link needs; the model of native/ops/topology_map.h, extended to the ring and to the
PS's all-to-all), with the hd-topo positions the engine itself logged, so a gap between the paper,
the model and the measurement can be read off the table."""

import argparse
import json
import os
import re
import shlex
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER = os.path.join(ROOT, "benchmarks", "workers", "bench_worker.py")
DOC = os.path.join(ROOT, "docs", "eflops.md")
BEGIN, END = "<!-- eflops-results:begin -->", "<!-- eflops-results:end -->"
MiB = 1 << 20

# The stacks, all on the herring engine (HOROVOD_BACKEND=herring), in the order of the tables.
STACKS = [
    ("ring", {"HERRING_ALLREDUCE": "ring"}, "TCP ring reduce-scatter + all-gather, ranks in rank order"),
    ("hd", {"HERRING_ALLREDUCE": "hd"}, "halving-doubling, positions in rank order"),
    ("herring", {"HERRING_ALLREDUCE": "herring"}, "parameter-server allreduce, one shard per rank (colocated)"),
    ("hd-topo", {"HERRING_ALLREDUCE": "hd-topo"}, "halving-doubling with the BiGraph mapping (HERRING_TOPOLOGY)"),
]
REFERENCE = "hd-topo"
PAPER_GAIN = 6.08


def log(msg):
    print(f"[eflops {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --- the scenario --------------------------------------------------------------------------------

def cluster_dict(np, direct_rate, shared_rate):
    """np hosts with one rank each; the first half in group a, the rest in b. Each host's own link
    runs at the direct rate, so the shared intra-group link is the only constraint inside a group."""
    half = (np + 1) // 2
    return {"rate": direct_rate,
            "hosts": [{"slots": 1, "group": "a" if i < half else "b"} for i in range(np)],
            "intra": {"link": "shared", "rate": shared_rate},
            "cross": {"link": "direct", "rate": direct_rate}}


# --- the bottleneck model ------------------------------------------------------------------------

class LinkModel:
    """The links of a cluster description as flows use them (same rules as native/ops/
    topology_map.cc): direct pairs have a link each per direction; a shared intra-group link
    carries both directions of every pair of its group; a shared cross path is one uplink and one
    downlink per group; switch paths are limited by the hosts' own links."""

    def __init__(self, spec):
        from tools.simcluster.cluster_spec import parse_rate
        self.spec = spec
        self.host_rate = [spec.host_rate_bits(i) for i in range(len(spec.hosts))]
        self.intra = (spec.intra.link, parse_rate(spec.intra.rate) or parse_rate(spec.rate))
        self.cross = (spec.cross.link, parse_rate(spec.cross.rate) or parse_rate(spec.rate))
        self.group = {i: spec.hosts[i].group for i in range(len(spec.hosts))}

    def links(self, a, b):
        if a == b:
            return []
        same = self.group[a] == self.group[b]
        kind, rate = self.intra if same else self.cross
        if kind == "direct":
            return [(("direct", a, b), rate)]
        out = [(("out", a), self.host_rate[a])]
        if kind == "shared":
            out += [(("group", self.group[a]), rate)] if same else \
                   [(("up", self.group[a]), rate), (("down", self.group[b]), rate)]
        return out + [(("in", b), self.host_rate[b])]

    def step_seconds(self, flows):
        load = {}
        for a, b, nbytes in flows:
            for link, rate in self.links(a, b):
                if rate:
                    load[link] = load.get(link, 0.0) + nbytes * 8 / rate
        return max(load.values(), default=0.0)

    def seconds(self, steps):
        return sum(self.step_seconds(s) for s in steps)


def ring_steps(n, size):
    """Reduce-scatter and all-gather around the ring of rank order: 2(n-1) steps of size/n."""
    return [[(i, (i + 1) % n, size / n) for i in range(n)] for _ in range(2 * (n - 1))]


def hd_steps(order, size):
    """order[v]: the rank at position v (rank order for hd; the engine's mapping for hd-topo)."""
    n = len(order)
    p = 1
    while p * 2 <= n:
        p *= 2
    k = p.bit_length() - 1
    fold = [[(order[p + i], order[i], size) for i in range(n - p)]] if n > p else []
    rounds = [[(order[v], order[v ^ (1 << j)], size / (2 << j)) for v in range(p)] for j in range(k)]
    unfold = [[(order[i], order[p + i], size) for i in range(n - p)]] if n > p else []
    return fold + rounds + rounds[::-1] + unfold


def ps_steps(n, size):
    """One server shard per rank: every rank pushes size/n to every other shard, then pulls the
    sums back (one rank per host: no shared-memory stage)."""
    push = [(i, j, size / n) for i in range(n) for j in range(n) if i != j]
    return [push, [(j, i, b) for i, j, b in push]]


def model_seconds(spec, stack, size, hd_topo_order):
    n = sum(h.slots for h in spec.hosts if h.role == "worker")
    m = LinkModel(spec)
    if stack == "ring":
        return m.seconds(ring_steps(n, size))
    if stack == "hd":
        return m.seconds(hd_steps(list(range(n)), size))
    if stack == "herring":
        return m.seconds(ps_steps(n, size))
    if stack == "hd-topo":
        return m.seconds(hd_steps(hd_topo_order, size)) if hd_topo_order else None
    raise ValueError(stack)


MAPPING = re.compile(r"hd-topo, process set 0: (.*?) of (\d+) members \(.*?\): position->member\[host/group\] "
                     r"(.*?); most flows on one link per step: ([\d ]+);")


def parse_mapping(output):
    """The global set's mapping as the engine logged it: (description, [rank per position], flows)."""
    m = MAPPING.search(output)
    if not m:
        return None
    order = [int(x.split("->")[1].split("[")[0]) for x in m.group(3).split(", ")]
    return {"strategy": m.group(1), "order": order, "positions": m.group(3),
            "most_flows_per_step": [int(x) for x in m.group(4).split()]}


# --- running -------------------------------------------------------------------------------------

def job_env(extra):
    """The caller's HOROVOD_*/HERRING_* variables must not leak into a stack's launch."""
    env = {k: None for k in os.environ if k.startswith(("HOROVOD_", "HERRING_")) and k != "HERRING_BENCH_CACHE"}
    env.update({"HOROVOD_BACKEND": "herring", "OMP_NUM_THREADS": "1"}, **extra)
    return env


def run_stack(cluster, stack, extra, sizes, timing, workdir, timeout):
    plan, out = os.path.join(workdir, f"plan-{stack}.json"), os.path.join(workdir, f"out-{stack}.jsonl")
    with open(plan, "w") as f:
        json.dump({"workloads": [{"id": "allreduce", "kind": "allreduce", "sizes": sizes, "timing": timing}]}, f)
    if os.path.exists(out):
        os.unlink(out)
    argv = [sys.executable, WORKER, "--api", "horovod", "--plan", plan, "--out", out]
    run = cluster.horovodrun(argv, env=job_env(extra), cwd=ROOT, timeout=timeout)
    records, errors = [], []
    if os.path.exists(out):
        with open(out) as f:
            for line in f:
                rec = json.loads(line)
                (errors if "error" in rec else records).append(rec)
    return run, records, errors


def measure(nps, sizes, direct_rate, shared_rate, timing, stacks, timeout):
    from tools.simcluster.cluster import SimulatedCluster
    from tools.simcluster.cluster_spec import ClusterSpec
    from tools.simcluster.link_bound import measure_link
    results = {"scenario": {"direct_rate": direct_rate, "shared_rate": shared_rate, "sizes": sizes,
                            "timing": timing, "stacks": [s for s, _, _ in STACKS if s in stacks],
                            "descriptions": {s: d for s, _, d in STACKS}},
               "runs": []}
    for np in nps:
        spec = ClusterSpec.from_dict(cluster_dict(np, direct_rate, shared_rate))
        with tempfile.TemporaryDirectory(prefix="herring-eflops-") as workdir, SimulatedCluster(spec=spec) as c:
            topo = os.path.join(workdir, "cluster.json")
            with open(topo, "w") as f:
                json.dump(spec.to_dict(), f)
            entry = {"np": np, "cluster": spec.to_dict(), "describe": c.plan.describe(), "stacks": {}}
            half = (np + 1) // 2
            log(f"np={np}: {c.plan.describe()}; measuring the links with iperf3")
            cross = measure_link(c, 0, half)
            intra = measure_link(c, 1, 0)
            entry["links"] = {"cross_direct_bps": cross.sent_bps, "intra_shared_bps": intra.sent_bps,
                              "cross": cross.describe(), "intra": intra.describe()}
            for stack, extra, _ in STACKS:
                if stack not in stacks:
                    continue
                env = dict(extra)
                if stack == "hd-topo":
                    env.update(HERRING_TOPOLOGY=topo, HOROVOD_LOG_LEVEL="INFO")
                log(f"np={np} {stack}: sizes {', '.join(str(s) for s in sizes)}")
                started = time.monotonic()
                run, records, errors = run_stack(c, stack, env, sizes, timing, workdir, timeout)
                res = {"ok": run.returncode == 0 and not errors, "seconds": round(time.monotonic() - started, 1),
                       "records": [{k: r[k] for k in ("bytes", "times", "median", "p25", "p75")} for r in records],
                       "errors": [e.get("error") for e in errors]}
                if not res["ok"]:
                    res["output_tail"] = run.output[-3000:]
                    log(f"  FAILED (exit {run.returncode}): {(res['errors'] or [run.output[-300:]])[0]}")
                if stack == "hd-topo":
                    res["mapping"] = parse_mapping(run.output)
                entry["stacks"][stack] = res
                log(f"  {'ok' if res['ok'] else 'failed'} in {res['seconds']} s: " +
                    ", ".join(f"{fmt_bytes(r['bytes'])} {r['median']:.3f} s" for r in res["records"]))
            results["runs"].append(entry)
    return results


# --- reading the results -------------------------------------------------------------------------

def fmt_bytes(n):
    return f"{n >> 20} MiB" if n >= MiB and n % MiB == 0 else (f"{n >> 10} KiB" if n % 1024 == 0 else f"{n} B")


def fmt_s(s):
    return "-" if s is None else (f"{s * 1e3:.0f} ms" if s < 1 else f"{s:.2f} s")


def median_of(entry, stack, size):
    res = entry["stacks"].get(stack)
    for r in (res or {}).get("records", []):
        if r["bytes"] == size:
            return r["median"]
    return None


def predictions(entry, size):
    from tools.simcluster.cluster_spec import ClusterSpec
    spec = ClusterSpec.from_dict(entry["cluster"])
    mapping = (entry["stacks"].get("hd-topo") or {}).get("mapping")
    order = mapping["order"] if mapping else None
    return {s: model_seconds(spec, s, size, order) for s in ("ring", "hd", "herring", "hd-topo")}


def link_bound(entry, size):
    """Least time of an allreduce whose every rank must send 2(n-1)/n of the buffer over one link
    at the measured direct rate (hd-topo's case: one link per exchange)."""
    n = entry["np"]
    return 2 * (n - 1) / n * size * 8 / entry["links"]["cross_direct_bps"]


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    colors = {"ring": "#ff9896", "hd": "#1f77b4", "herring": "#2ca02c", "hd-topo": "#d62728"}
    runs = results["runs"]
    sizes = results["scenario"]["sizes"]
    fig, axes = plt.subplots(2, len(runs), figsize=(5.6 * len(runs), 8), squeeze=False)
    for col, entry in enumerate(runs):
        ax_t, ax_r = axes[0][col], axes[1][col]
        for stack in results["scenario"]["stacks"]:
            pts = [(s, median_of(entry, stack, s)) for s in sizes]
            pts = [(s, t) for s, t in pts if t is not None]
            if pts:
                ax_t.plot([s for s, _ in pts], [t for _, t in pts], "o-", color=colors[stack], label=stack)
            model = [(s, predictions(entry, s)[stack]) for s in sizes]
            model = [(s, t) for s, t in model if t]
            if model:
                ax_t.plot([s for s, _ in model], [t for _, t in model], ":", color=colors[stack], alpha=0.8)
        ax_t.plot(sizes, [link_bound(entry, s) for s in sizes], "k--", lw=1, label="link bound")
        ax_t.set_xscale("log", base=2)
        ax_t.set_yscale("log")
        ax_t.set_xticks(sizes)
        ax_t.set_xticklabels([fmt_bytes(s) for s in sizes])
        ax_t.set_ylabel("median time (s); dotted: model")
        ax_t.set_title(f"np={entry['np']}: {entry['np'] // 2 + entry['np'] % 2}+{entry['np'] // 2} hosts")
        ax_t.grid(True, which="both", alpha=0.3)
        ax_t.legend(fontsize=8)
        largest = max(s for s in sizes if median_of(entry, REFERENCE, s)) if any(
            median_of(entry, REFERENCE, s) for s in sizes) else None
        others = [s for s in results["scenario"]["stacks"] if s != REFERENCE]
        if largest:
            ref = median_of(entry, REFERENCE, largest)
            pred = predictions(entry, largest)
            xs = range(len(others))
            measured = [(median_of(entry, s, largest) or 0) / ref for s in others]
            modeled = [pred[s] / pred[REFERENCE] if pred[s] and pred[REFERENCE] else 0 for s in others]
            ax_r.bar([x - 0.2 for x in xs], measured, 0.4, color=[colors[s] for s in others], edgecolor="black",
                     label="measured")
            ax_r.bar([x + 0.2 for x in xs], modeled, 0.4, color="white", edgecolor=[colors[s] for s in others],
                     hatch="//", label="model")
            for x, v in zip(xs, measured):
                ax_r.text(x - 0.2, v, f"{v:.2f}x", ha="center", va="bottom", fontsize=8)
            ax_r.axhline(PAPER_GAIN, color="gray", ls=":", lw=1)
            ax_r.text(len(others) - 0.5, PAPER_GAIN, f"paper {PAPER_GAIN}x", ha="right", va="bottom", fontsize=8,
                      color="gray")
            ax_r.set_xticks(list(xs))
            ax_r.set_xticklabels(others)
            ax_r.set_ylabel(f"time / hd-topo's time, {fmt_bytes(largest)}")
            ax_r.set_title(f"np={entry['np']}: how much faster hd-topo is")
            ax_r.legend(fontsize=8)
            ax_r.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def section(results, doc_dir, img_path, command):
    """The results as markdown (for docs/eflops.md, and for docs/benchmarks.md via report.py)."""
    sc = results["scenario"]
    stacks = sc["stacks"]
    lines = [f"Generated by `{command}` on {results.get('date', '?')} (load average at start "
             f"{results.get('load_average', '?')}). Raw results: `{results.get('results_path', 'eflops.json')}`.\n",
             f"**Scenario.** np hosts with one rank each, in two groups (the first half in `a`, the rest "
             f"in `b`). Inside a group all traffic shares one link of {sc['shared_rate']} (both directions "
             f"together); every pair of hosts across the groups has a direct link of {sc['direct_rate']} each "
             f"way; each host's own link runs at {sc['direct_rate']}. The same file is the cluster "
             f"description and `HERRING_TOPOLOGY`. Float32 sum-allreduce, in place, checked on every rank; "
             f"each iteration is timed from a barrier to the slowest rank's completion; medians over "
             f"{sc['timing']['min_iters']}-{sc['timing']['max_iters']} iterations after {sc['timing']['warmup']} "
             f"warm-up. `model` is the bottleneck model of the same links (see above).\n"]
    for entry in results["runs"]:
        n = entry["np"]
        lines.append(f"### np = {n}\n")
        lines.append(f"Links measured with iperf3 (one stream, 3 s) in this cluster: a direct cross-group link "
                     f"{entry['links']['cross_direct_bps'] / 1e6:.0f} Mbit/s of {sc['direct_rate']} configured, a "
                     f"group's shared link {entry['links']['intra_shared_bps'] / 1e6:.0f} Mbit/s of "
                     f"{sc['shared_rate']} (TCP payload; tbf counts Ethernet frames, so 95.6% is the most "
                     f"there is).\n")
        mapping = (entry["stacks"].get("hd-topo") or {}).get("mapping")
        if mapping:
            lines.append(f"hd-topo mapping the engine logged: {mapping['strategy']}, position->rank[host/group] "
                         f"{mapping['positions']}; most flows on one link, per step: "
                         f"{' '.join(map(str, mapping['most_flows_per_step']))}.\n")
        header = ["Size"] + stacks + [f"{s} / {REFERENCE}" for s in stacks if s != REFERENCE] + \
                 [f"model {s} / {REFERENCE}" for s in stacks if s != REFERENCE] + [f"{REFERENCE} of link bound"]
        rows = []
        for size in sc["sizes"]:
            ref = median_of(entry, REFERENCE, size)
            pred = predictions(entry, size)
            cells = [fmt_bytes(size)]
            cells += [fmt_s(median_of(entry, s, size)) + (f" (model {fmt_s(pred[s])})" if pred.get(s) else "")
                      for s in stacks]
            cells += ["-" if not ref or median_of(entry, s, size) is None else f"{median_of(entry, s, size) / ref:.2f}x"
                      for s in stacks if s != REFERENCE]
            cells += ["-" if not pred.get(s) or not pred.get(REFERENCE) else f"{pred[s] / pred[REFERENCE]:.2f}x"
                      for s in stacks if s != REFERENCE]
            cells.append("-" if not ref else f"{100 * link_bound(entry, size) / ref:.0f}%")
            rows.append(cells)
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|" + "|".join(" --- " for _ in header) + "|")
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        lines.append("")
        failed = [s for s in stacks if s in entry["stacks"] and not entry["stacks"][s]["ok"]]
        for s in failed:
            res = entry["stacks"][s]
            lines.append(f"**{s} failed at np={n}:** " + "; ".join(res.get("errors") or []) +
                         "\n\n```\n" + res.get("output_tail", "")[-1500:] + "\n```\n")
    rel = os.path.relpath(img_path, doc_dir)
    lines.append(f"![ring, hd, herring and hd-topo in the BiGraph cluster]({rel})\n")
    return "\n".join(lines)


def goals(results):
    """The EFLOPS acceptance figure in the shape the report's goal table takes (the format of
    `benchmarks.report --cluster-results` goals): hd-topo against the ring at the largest np and
    size measured, next to the paper's 6.08x and the model's prediction for this scenario."""
    runs = [r for r in results.get("runs", []) if median_of(r, REFERENCE, max(results["scenario"]["sizes"]))]
    if not runs:
        return []
    entry = max(runs, key=lambda r: r["np"])
    size = max(results["scenario"]["sizes"])
    ring, topo = median_of(entry, "ring", size), median_of(entry, REFERENCE, size)
    pred = predictions(entry, size)
    if ring is None:
        return []
    ratio = ring / topo
    return [{"goal": f"EFLOPS (BiGraph cluster, np={entry['np']}, {fmt_bytes(size)}): topology-aware "
                     f"halving-doubling vs ring (paper: {PAPER_GAIN}x from algorithm and topology)",
             "target": f">= {PAPER_GAIN}x",
             "measured": f"ring {fmt_s(ring)}, hd-topo {fmt_s(topo)}; model of this scenario "
                         f"{pred['ring'] / pred[REFERENCE]:.2f}x (docs/eflops.md says why measured < model)",
             "ratio": round(ratio, 2), "met": ratio >= PAPER_GAIN}]


def write_doc(doc, text):
    with open(doc) as f:
        content = f.read()
    if BEGIN not in content or END not in content:
        raise SystemExit(f"{doc} has no {BEGIN} ... {END} markers to write the results between")
    head, rest = content.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    with open(doc, "w") as f:
        f.write(head + BEGIN + "\n" + text.rstrip() + "\n" + END + tail)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.eflops", description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--nps", type=int, nargs="+", default=[4, 8], help="ranks (= hosts), default 4 8")
    p.add_argument("--sizes", type=int, nargs="+", default=[4 * MiB, 16 * MiB, 64 * MiB])
    p.add_argument("--direct-rate", default="200mbit", help="each cross-group pair's direct link (and host links)")
    p.add_argument("--shared-rate", default="100mbit", help="each group's shared internal link")
    p.add_argument("--stacks", nargs="+", default=[s for s, _, _ in STACKS], choices=[s for s, _, _ in STACKS])
    p.add_argument("--iters", type=int, nargs=2, default=[3, 5], metavar=("MIN", "MAX"))
    p.add_argument("--budget", type=float, default=8.0, help="seconds of timed iterations per size")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per launch")
    p.add_argument("--out", default=os.path.join(ROOT, "docs", "eflops.json"))
    p.add_argument("--img", default=os.path.join(ROOT, "docs", "img", "eflops_allreduce.png"))
    p.add_argument("--doc", default=DOC, help="markdown file with the results markers")
    p.add_argument("--no-doc", action="store_true", help="do not write the section into --doc")
    p.add_argument("--report", metavar="RESULTS", help="only regenerate the plot and section from saved results")
    args = p.parse_args(argv)
    if args.report:
        with open(args.report) as f:
            results = json.load(f)
    else:
        timing = {"warmup": 1, "min_iters": args.iters[0], "max_iters": args.iters[1], "budget": args.budget}
        given = sys.argv[1:] if argv is None else argv
        load_at_start = " ".join(f"{x:.1f}" for x in os.getloadavg())
        results = measure(args.nps, args.sizes, args.direct_rate, args.shared_rate, timing, args.stacks,
                          args.timeout)
        results.update(command=" ".join(["python -m benchmarks.eflops"] + [shlex.quote(a) for a in given]),
                       date=time.strftime("%Y-%m-%d %H:%M"),
                       load_average=load_at_start)
        results["results_path"] = os.path.relpath(os.path.abspath(args.out), os.path.dirname(os.path.abspath(args.doc)))
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
        log(f"wrote {args.out}")
    plot(results, args.img)
    log(f"wrote {args.img}")
    if not args.no_doc:
        write_doc(args.doc, section(results, os.path.dirname(os.path.abspath(args.doc)), args.img,
                                    results.get("command", "python -m benchmarks.eflops")))
        log(f"wrote the results section of {args.doc}")
    return 0 if all(s["ok"] for r in results["runs"] for s in r["stacks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
