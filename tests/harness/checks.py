"""What the TensorFlow workers share: a registry of named checks run in order on every rank, and
the per-rank results file ($HERRING_TEST_RESULTS/<rank>.json) the pytest side reads.

All ranks run the same collectives in the same order and only compare afterwards, so a failing
check never leaves a peer waiting in a collective it skipped."""

import json
import os
import sys
import time
import traceback

CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


def run_checks(rank, extra=None):
    """Runs every registered check (or those named in HERRING_TEST_ONLY), writes the results
    file, returns the exit status."""
    only = os.environ.get("HERRING_TEST_ONLY")
    results = {}
    for fn in CHECKS:
        if only and fn.__name__ not in only.split(","):
            continue
        start = time.monotonic()
        try:
            fn()
            results[fn.__name__] = "ok"
        except Exception:  # noqa: BLE001 - reported per check
            results[fn.__name__] = traceback.format_exc()
        # Progress in the launcher's output: where a hung or slow job stopped.
        print(f"rank {rank}: {fn.__name__} {'ok' if results[fn.__name__] == 'ok' else 'FAILED'} "
              f"({time.monotonic() - start:.2f} s)", file=sys.stderr, flush=True)
        # Written after every check: if a failure leaves the ranks out of step and the job has
        # to be killed, what ran so far (and why it failed) is still reported.
        write_results(rank, {"results": results})
    write_results(rank, {"results": results, **(extra() if extra else {})})
    failed = [k for k, v in results.items() if v != "ok"]
    for k in failed:
        print(f"rank {rank}: {k} FAILED\n{results[k]}", file=sys.stderr)
    return 1 if failed else 0


def write_results(rank, data):
    out_dir = os.environ.get("HERRING_TEST_RESULTS")
    if out_dir:
        with open(os.path.join(out_dir, f"{rank}.json"), "w") as f:
            json.dump(data, f)
