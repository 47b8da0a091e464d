"""DDP on herring before and after a change, in the same run: benchmarks/workers/ddp_interleaved.py
(DDP on gloo, DDP on herring and Horovod's API on herring, alternating in one job) from two
checkouts, each with its own .venv, launches alternating between them so that the machine's drift
hits both. Prints a markdown table of the median step per setup (median over the launches).

    .venv/bin/python -m benchmarks.single_host.ddp_before_after /path/to/before-checkout \\
        [--models resnet50 bert-base] [--np 4] [--launches 2]"""

import os
import re
import statistics

from benchmarks.common import before_after

LINE = re.compile(r"^(\S+) np=(\d+) (.+?)\s+median\s+(\d+) ms")


def launch(checkout, model, np_):
    worker = os.path.join(checkout, "benchmarks", "workers", "ddp_interleaved.py")
    out = before_after.torchrun(checkout, np_, worker, [model])
    return {m.group(3).strip(): int(m.group(4)) for m in map(LINE.match, out.splitlines()) if m}


def main():
    p = before_after.parser(__doc__, launches=2)
    p.add_argument("--models", nargs="+", default=["resnet50", "bert-base"])
    p.add_argument("--np", type=int, default=4)
    args = p.parse_args()
    results, loads = before_after.measure(args, args.models, lambda checkout, model: launch(checkout, model, args.np))
    rows = []
    for model, runs in results:
        for setup in runs["after"][0]:
            med = {name: statistics.median(r[setup] for r in rs if setup in r) for name, rs in runs.items()}
            per = {name: ", ".join(str(r.get(setup, "-")) for r in rs) for name, rs in runs.items()}
            rows.append(f"| {model} | {args.np} | {setup} | {med['before']:.0f} ms ({per['before']}) | "
                        f"{med['after']:.0f} ms ({per['after']}) | {med['before'] / med['after']:.2f}x |")
    print(f"Load average during the run: {loads}.\n")
    print("| model | np | setup | before: median step (per launch) | after | before / after |")
    print("| --- | --- | --- | --- | --- | --- |")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
