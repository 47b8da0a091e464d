"""The markdown of benchmarks/autotune's results: per workload, the step time under the settings
each configuration ended with (median over its launches' medians), as a ratio to the defaults."""

import statistics

from benchmarks.common.formatting import fmt_bytes

ALGORITHMS = ["herring", "ring", "hd", "hd-topo"]


def _settled(launch):
    s = launch["settings"]
    return (f"fusion {fmt_bytes(s['tuned_fusion_threshold_bytes'])}, cycle {s['tuned_cycle_time_us'] / 1000:.3g} ms, "
            f"small {fmt_bytes(s['tuned_small_message_bytes'])}, {ALGORITHMS[s['tuned_allreduce']]}"
            + (f", {s['tuned_tcp_streams']} TCP streams" if "tuned_tcp_streams" in s else ""))


def _tuned(settings):
    return {k: v for k, v in (settings or {}).items() if k.startswith("tuned_")}


def section(results):
    lines = [f"Machine: {results['machine']}.", "",
             "Step time after the search settled (slowest rank per step, median of each launch; launches of "
             "the three configurations interleaved), and what the search settled on. Ratio: the defaults' "
             "step time over this configuration's (above 1: faster than the defaults). On a loaded machine the "
             "launches' own drift dominates: a search that settled on the defaults' settings measures it. Stalled: "
             "timed steps slower than twice the launch's fastest step.", "",
             "| np | workload | configuration | step (ms) per launch | ratio to defaults | stalled steps | search steps | step during search (ms) | settled on |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for run in results["runs"]:
        ok = {name: [x for x in ls if "error" not in x] for name, ls in run["launches"].items()}
        base = statistics.median(x["median_step_ms"] for x in ok["defaults"]) if ok["defaults"] else None
        defaults_settings = ok["defaults"][0]["settings"] if ok["defaults"] else None
        for name, ls in run["launches"].items():
            good = ok[name]
            if not good:
                lines.append(f"| {run['np']} | {run['workload']} | {name} | failed: {ls[0].get('error', '')[:80]} | | | | | |")
                continue
            med = statistics.median(x["median_step_ms"] for x in good)
            per = ", ".join(f"{x['median_step_ms']:.3g}" for x in good)
            ratio = f"{base / med:.2f}x" if base else "-"
            searched = name != "defaults"
            steps = ", ".join(str(x["search_steps"]) for x in good) if searched else "-"
            during = ", ".join(f"{x['search_median_step_ms']:.3g}" for x in good) if searched else "-"
            settled = "; ".join(_settled(x) + (" (the defaults: this ratio is the machine's drift)"
                                               if _tuned(x["settings"]) == _tuned(defaults_settings) else "")
                                for x in good) if searched else "defaults"
            stalled = ", ".join(f"{x['stalled_steps']}/{x['after_steps']}" if "stalled_steps" in x else "-" for x in good)
            lines.append(f"| {run['np']} | {run['workload']} | {name} | {per} | {ratio} | {stalled} | {steps} | {during} | {settled} |")
    return "\n".join(lines) + "\n"
