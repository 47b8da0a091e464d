"""Allreduce of the same sizes on several stacks in one run, printed as medians and ratios.

    .venv/bin/python benchmarks/compare_allreduce.py --np 4 --sizes 67108864 --stacks herring torch-gloo
"""

import argparse

import stacks


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--np", type=int, default=4)
    p.add_argument("--sizes", type=int, nargs="+", default=[64 << 20])
    p.add_argument("--stacks", nargs="+", default=["herring", "herring-ring", "torch-gloo", "mpi"])
    p.add_argument("--iters", type=int, default=10)
    args = p.parse_args()
    results = {s: {r["bytes"]: r for r in stacks.run(s, args.np, args.sizes, args.iters)} for s in args.stacks}
    base = args.stacks[0]
    print(f"allreduce of float32, np={args.np}, median of {args.iters} (slowest rank per iteration)")
    print(f"{'bytes':>12} " + " ".join(f"{s:>14}" for s in args.stacks) + "   ratios to " + base)
    for size in args.sizes:
        meds = [results[s][size]["median"] for s in args.stacks]
        ratios = " ".join(f"{m / meds[0]:.2f}x" for m in meds[1:])
        print(f"{size:>12} " + " ".join(f"{m * 1e3:>12.1f}ms" for m in meds) + "   " + ratios)


if __name__ == "__main__":
    main()
