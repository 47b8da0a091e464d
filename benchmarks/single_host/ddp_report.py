"""The torch.distributed report (docs/benchmarks_ddp.md) from a run of the `ddp` preset: step time
of torch's DistributedDataParallel on backend "herring" beside "gloo" (torch's defaults, and with
gradient_as_bucket_view, and on herring also with the engine averaging through
hvd_herring.torch.distributed.average_hook), and of Horovod's DistributedOptimizer on herring, on
the ResNet-50 and BERT-base gradient sets and the communication-heavy MLP, with the goals' verdicts.

    .venv/bin/python -m benchmarks.single_host.run --preset ddp --out /tmp/ddp/benchmarks.md \\
        --results benchmarks/results/ddp.json --no-peer-setup
    .venv/bin/python -m benchmarks.single_host.ddp_report benchmarks/results/ddp.json   # report only"""

import argparse
import json
import os
import statistics

from benchmarks.common.formatting import fmt_time
from benchmarks.common.paths import DOCS_DIR

# (label, stack, variant) in the table's column order.
COLUMNS = [("DDP, gloo", "torch-gloo", ""), ("DDP, herring", "ddp-herring", ""),
           ("DDP bucket view, gloo", "torch-gloo", "bucket-view"), ("DDP bucket view, herring", "ddp-herring", "bucket-view"),
           ("DDP bucket view + average_hook, herring", "ddp-herring", "bucket-view-average-hook"),
           ("Horovod API, herring", "herring", "")]
# (herring's variant, what, gloo's variant) of the DDP settings with goals: the hook is herring's, so
# with it herring is compared with gloo's bucket view, each backend's best.
SETTINGS = [("", "torch's defaults", ""), ("bucket-view", "gradient_as_bucket_view", "bucket-view"),
            ("bucket-view-average-hook", "gradient_as_bucket_view + average_hook", "bucket-view")]
GOAL_NP = 4
GOAL_MODELS = ("resnet50", "bert-base")


def medians(data):
    """{(model, stack, variant, np): median step seconds}, pooled over repeats."""
    pooled = {}
    for r in data["records"]:
        if r.get("kind") in ("gradset", "train") and "median" in r:
            pooled.setdefault((r["model"], r["stack"], r.get("variant", ""), r["np"]), []).append(r["median"])
    return {k: statistics.median(v) for k, v in pooled.items()}


def table(steps):
    models = sorted({k[0] for k in steps})
    nps = sorted({k[3] for k in steps})
    rows = ["| Model | np | " + " | ".join(l for l, _, _ in COLUMNS) + " | gloo / herring (DDP) | DDP herring / Horovod API |",
            "| --- | --- |" + " --- |" * (len(COLUMNS) + 2)]
    for model in models:
        for np in nps:
            cells = [fmt_time(steps[(model, s, v, np)]) if (model, s, v, np) in steps else "-" for _, s, v in COLUMNS]
            gloo, ours = steps.get((model, "torch-gloo", "", np)), steps.get((model, "ddp-herring", "", np))
            hvd = steps.get((model, "herring", "", np))
            cells.append(f"{gloo / ours:.2f}x" if gloo and ours else "-")
            cells.append(f"{ours / hvd:.2f}x" if ours and hvd else "-")
            rows.append(f"| {model} | {np} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def goals(steps):
    rows = ["| Goal | Target | Measured | Verdict |", "| --- | --- | --- | --- |"]
    for model in GOAL_MODELS:
        for variant, what, gloo_variant in SETTINGS:
            gloo = steps.get((model, "torch-gloo", gloo_variant, GOAL_NP))
            ours = steps.get((model, "ddp-herring", variant, GOAL_NP))
            against = what if gloo_variant == variant else f"{what} (gloo: {gloo_variant.replace('-', ' ')})"
            rows.append(goal_row(f"{model}, np={GOAL_NP}, {against}: DDP on herring faster than on gloo", ">= 2x",
                                 gloo / ours if gloo and ours else None, lambda r: r >= 2))
        hvd = steps.get((model, "herring", "", GOAL_NP))
        for variant, what, _ in SETTINGS:
            ours = steps.get((model, "ddp-herring", variant, GOAL_NP))
            rows.append(goal_row(f"{model}, np={GOAL_NP}, {what}: DDP on herring within 10% of Horovod's API on herring",
                                 "<= 1.10x", ours / hvd if ours and hvd else None, lambda r: r <= 1.10))
    return "\n".join(rows)


def defaults_cost(steps):
    """What torch's defaults cost over gradient_as_bucket_view on each backend: DDP's own passes
    (each gradient multiplied into its bucket, and copied back), which the backend does not run."""
    parts = []
    for model in GOAL_MODELS:
        cost = {}
        for stack in ("torch-gloo", "ddp-herring"):
            plain, view = steps.get((model, stack, "", GOAL_NP)), steps.get((model, stack, "bucket-view", GOAL_NP))
            if plain and view:
                cost[stack] = fmt_time(plain - view)
        if len(cost) == 2:
            parts.append(f"{model} {cost['torch-gloo']} on gloo and {cost['ddp-herring']} on herring")
    if not parts:
        return ""
    return ("With torch's defaults DDP also multiplies every gradient into its bucket and copies the result back, "
            f"passes of its own that the backend does not run. Their cost (defaults minus bucket view, np={GOAL_NP}): "
            + "; ".join(parts) + ".")


def goal_row(goal, target, ratio, met):
    """One row of the goal table; `ratio` is None when a side was not measured."""
    verdict = "not measured" if ratio is None else "met" if met(ratio) else "not met"
    return f"| {goal} | {target} | {'-' if ratio is None else f'{ratio:.2f}x'} | {verdict} |"


def section(data):
    """The goals and the table as markdown (docs/benchmarks_ddp.md; docs/benchmarks.md through report.py)."""
    steps = medians(data)
    m, meta = data["machine"], data["meta"]
    parts = [
        f"From `{meta['command']}` on {m.get('date', '?')} (load average {m.get('load_average_start')} at the "
        f"start, {m.get('load_average_end')} at the end; raw results `{meta.get('results_path')}`).\n",
        "One training step's gradients (the ResNet-50 and BERT-base gradient sets: a backward pass's tensors "
        "submitted in backward order) or one step of the communication-heavy MLP, median over the steps. "
        "`DDP` is torch's DistributedDataParallel with its defaults (25 MiB buckets) on "
        "`init_process_group(\"gloo\")` or `init_process_group(\"herring\")` "
        "(`import hvd_herring.torch.distributed`); `bucket view` adds `gradient_as_bucket_view=True`; "
        "`+ average_hook` also registers `hvd_herring.torch.distributed.average_hook`, with which the engine "
        "averages while it writes the result instead of DDP dividing the bucket first (gloo has no such hook); "
        "`Horovod API` is `hvd.DistributedOptimizer` on the same engine, with ordinary gradients. On herring "
        "DDP's buckets move into zero-copy memory at their second allreduce (HERRING_DIST_ZERO_COPY, "
        "docs/zero_copy.md); the timed steps follow three warm-up steps (build, rebuild, move).\n",
        "### torch.distributed goals\n", goals(steps), "", defaults_cost(steps), "",
        "### Step time\n", table(steps), "",
    ]
    failed = [l for l in data["launches"] if not l["ok"]]
    if failed:
        parts += ["### Launches that failed\n"] + [f"- {l['stack']} {l['variant'] or ''} np={l['np']}: "
                                                  f"{(l.get('errors') or ['?'])[0]}" for l in failed] + [""]
    return "\n".join(parts)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", help="the ddp preset's results JSON")
    p.add_argument("--out", default=os.path.join(DOCS_DIR, "benchmarks_ddp.md"))
    args = p.parse_args(argv)
    with open(args.results) as f:
        data = json.load(f)
    with open(args.out, "w") as f:
        f.write("# torch.distributed: DDP on the herring engine\n\n" + section(data))
    print(os.path.abspath(args.out))


if __name__ == "__main__":
    main()
