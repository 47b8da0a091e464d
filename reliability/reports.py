"""Turns the figures of the soak and of a long fuzz run into the tables of docs/reliability.md
(sections `soak` and `fuzz`) and keeps the raw figures in benchmarks/results/reliability.json.

    .venv/bin/python -m reliability.reports soak SOAK.json
    .venv/bin/python -m reliability.reports fuzz FUZZ.json
"""

import json
import sys

from reliability import doc_sections


def render_soak(report):
    ranks = report["ranks"]
    lines = [
        f"np={report['np']}, {report['steps']:,} steps of {report['tensors']} allreduces "
        f"({report['elements_per_step']:,} float32 elements per step), every result checked: "
        f"{report['wall_seconds']:.0f} s wall ({report.get('date', '')}).",
        "",
        *([f"Load average of the machine during the run: {report['load']} (the time per step below depends "
           "on it: it is not a performance figure)."] if report.get("load") else []),
        "",
        "| Rank | Steps | Wrong results | RSS at step 1 | RSS after warm-up (step 1,000) | RSS at the end | "
        "Largest rise after warm-up | Open fds | Threads | ms per step (median) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r, s in sorted(ranks.items(), key=lambda kv: int(kv[0])):
        lines.append(f"| {r} | {s['steps']:,} | {s['wrong']} | {s['rss_mb_first']} MiB | {s['rss_mb_baseline']} MiB | "
                     f"{s['rss_mb_last']} MiB | {s['rss_mb_max_over_baseline']:+.2f} MiB | "
                     f"{', '.join(map(str, s['fds']))} | {', '.join(map(str, s['threads']))} | {s['ms_per_step_median']} |")
    lines += ["", "Resident memory (MiB) of each rank, sampled every "
              f"{ranks['0']['samples'][2]['step'] - ranks['0']['samples'][1]['step'] if len(ranks['0']['samples']) > 2 else '?'} steps:",
              "", "| Step | " + " | ".join(f"rank {r}" for r in sorted(ranks, key=int)) + " |",
              "| --- |" + " --- |" * len(ranks)]
    steps = [s["step"] for s in ranks["0"]["samples"]]
    for i, step in enumerate(steps):
        row = [f"{ranks[r]['samples'][i]['rss_kb'] / 1024:.1f}" for r in sorted(ranks, key=int)
               if i < len(ranks[r]["samples"])]
        lines.append(f"| {step:,} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def render_fuzz(stats):
    return "\n".join([
        "| Date | Seconds | Executions | Executions per second | Edges covered | Corpus (files) | Crashes |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        f"| {stats.get('date', '')} | {stats['seconds']:.0f} | {stats['number_of_executed_units']:,} | "
        f"{stats['average_exec_per_sec']:,} | {stats.get('edges_covered', '?')} | {stats['corpus_files']} | 0 |",
    ])


def main():
    kind, path = sys.argv[1], sys.argv[2]
    with open(path) as f:
        figures = json.load(f)
    if kind == "soak":
        figures["ranks"] = {str(k): v for k, v in figures["ranks"].items()}
        doc_sections.save_figures("soak", figures)
        doc_sections.replace_section("soak", render_soak(figures))
    elif kind == "fuzz":
        doc_sections.save_figures("fuzz", figures)
        doc_sections.replace_section("fuzz", render_fuzz(figures))
    else:
        raise SystemExit(f"unknown report {kind!r}: soak or fuzz")


if __name__ == "__main__":
    main()
