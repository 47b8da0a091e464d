"""A quick side-by-side of allreduce sizes on chosen stacks, printed (no report): for tuning.

    .venv/bin/python -m benchmarks.single_host.compare_allreduce --np 4 --sizes 67108864 --stacks herring torch-gloo
"""

import argparse
import sys

from benchmarks.common.formatting import fmt_bytes, fmt_time
from benchmarks.single_host import stacks
from benchmarks.single_host.plan import ALL_STACKS


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--np", type=int, default=4)
    p.add_argument("--sizes", type=int, nargs="+", default=[64 << 20])
    p.add_argument("--stacks", nargs="+", choices=ALL_STACKS, default=["herring", "herring-ring", "torch-gloo", "mpi"])
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--herring-env", nargs="+", default=[], metavar="KEY=VALUE")
    args = p.parse_args()
    extra = dict(kv.split("=", 1) for kv in args.herring_env)
    spec = {"id": "allreduce", "kind": "allreduce", "sizes": args.sizes,
            "timing": {"warmup": 2, "min_iters": args.iters, "max_iters": args.iters}}
    medians = {}
    for name in args.stacks:
        ok, why = stacks.available(name)
        if not ok:
            print(f"{name}: {why}", file=sys.stderr)
            continue
        res = stacks.launch(name, args.np, [spec], timeout=900, extra_env=extra if name.startswith("herring") else None)
        if not res.ok:
            print(f"{name} failed:\n{res.output_tail}", file=sys.stderr)
        medians[name] = {r["bytes"]: r["median"] for r in res.records}
    names = list(medians)
    print(f"allreduce of float32, np={args.np}, median of {args.iters} (slowest rank per iteration)")
    print(f"{'size':>10} " + " ".join(f"{s:>14}" for s in names) + ("   ratios to " + names[0] if names else ""))
    for size in args.sizes:
        meds = [medians[s].get(size) for s in names]
        ratios = " ".join("-" if m is None or not meds[0] else f"{m / meds[0]:.2f}x" for m in meds[1:])
        print(f"{fmt_bytes(size):>10} " + " ".join(f"{fmt_time(m):>14}" for m in meds) + "   " + ratios)


if __name__ == "__main__":
    main()
