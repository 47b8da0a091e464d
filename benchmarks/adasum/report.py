"""The Adasum-against-Sum report (benchmarks/adasum/run.py), a page of its own and a section of
docs/benchmarks.md."""

from benchmarks.common.formatting import fmt_bytes, fmt_time


def section(results):
    """The markdown of one run (results of benchmarks.adasum.run), without a heading."""
    lines = [f"Machine: {results['machine']}. Each size is one float32 tensor allreduced in place, ops "
             "alternating per size in one job; median of the slowest rank's time per call, after a "
             "barrier (benchmarks/workers/adasum_vs_sum.py, `python -m benchmarks.adasum.run`).", "",
             "Adasum moves the same bytes as a halving-doubling allreduce (2(n-1)/n of the buffer per rank) "
             "plus log2(n) rounds of small dot-product exchanges per level, and computes a dot product "
             "and two norms in float64 over every element; Sum takes the herring PS allreduce with its "
             "one-step shared-memory path for small messages.", ""]
    for entry in results["runs"]:
        lines += [f"**np={entry['np']}**", "", "| size | Sum | Adasum | Adasum / Sum |", "| --- | --- | --- | --- |"]
        for row in entry["rows"]:
            lines.append(f"| {fmt_bytes(row['bytes'])} | {fmt_time(row['sum'])} | {fmt_time(row['adasum'])} | "
                         f"{row['adasum'] / row['sum']:.2f}x |")
        lines.append("")
    return "\n".join(lines) + "\n"
