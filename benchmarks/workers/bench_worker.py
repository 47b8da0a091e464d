"""Runs inside every rank of one stack: connects through the stack's API and runs the workloads of
a plan file in order. Rank 0 appends one JSON record per measurement to the results file (a file,
not stdout, so no launcher's output prefixes matter); a rank whose workload fails appends an error
record naming itself and the workload, then exits non-zero.

    bench_worker.py --api {horovod,torch,mpi,deepspeed} --plan PLAN.json --out RESULTS.jsonl"""

import argparse
import json
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import comms  # noqa: E402
import workloads  # noqa: E402


def append(path, record):
    # One write per line: appends of a few KiB from different ranks do not interleave.
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--api", choices=["horovod", "torch", "mpi", "deepspeed"], required=True)
    p.add_argument("--plan", required=True, help="JSON file: {'workloads': [{'kind': ..., ...}]}")
    p.add_argument("--out", required=True, help="JSONL file rank 0 appends records to")
    args = p.parse_args()
    with open(args.plan) as f:
        plan = json.load(f)

    comm = comms.connect(args.api)
    common = {"api": args.api, "backend": comm.backend, "np": comm.size}
    for spec in plan["workloads"]:
        started = time.monotonic()

        def emit(rec, spec=spec, started=started):
            # wall_seconds: since the workload started (setup and checks included), for planning.
            if comm.rank == 0:
                append(args.out, dict(common, workload=spec.get("id", spec["kind"]),
                                      wall_seconds=round(time.monotonic() - started, 2), **rec))

        try:
            workloads.WORKLOADS[spec["kind"]](comm, spec, emit)
        except Exception as e:
            append(args.out, dict(common, kind=spec["kind"], workload=spec.get("id", spec["kind"]),
                                  rank=comm.rank, error=f"{type(e).__name__}: {e}",
                                  traceback=traceback.format_exc()[-3000:]))
            raise


if __name__ == "__main__":
    main()
