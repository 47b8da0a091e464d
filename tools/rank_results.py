"""What the ranks of a launched job wrote, one JSON file a rank (<dir>/<rank>.json): read the same
way by the tests' harness (tests/harness/launch.py) and the scale benchmark (benchmarks/scale)."""

import json
import os


def read_rank_results(results_dir, n):
    """{rank: what that rank wrote to <results_dir>/<rank>.json}, for the ranks of 0..n-1 that wrote one."""
    per_rank = {}
    for r in range(n):
        path = os.path.join(results_dir, f"{r}.json")
        if os.path.exists(path):
            with open(path) as f:
                per_rank[r] = json.load(f)
    return per_rank
