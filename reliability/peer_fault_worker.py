"""Runs inside every rank of a comparison run (reliability/compare_peers.py): 4 MiB float32
allreduces back to back, through Horovod's torch API (--api horovod: herring or stock
Horovod-gloo, whichever `horovod.torch` is) or torch.distributed with gloo (--api torch, under
torchrun). The driver then SIGKILLs or SIGSTOPs one rank; every rank that raises records what it
raised and when (CLOCK_MONOTONIC, comparable with the driver's clock) in <results>/<rank>.json.

Ranks keep their default signal handling unless --ignore-sigterm: a launcher that terminates them
when a peer dies is part of what a user sees; ignoring its SIGTERM measures the library alone."""

import argparse
import datetime
import json
import os
import signal
import sys
import time

import torch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--api", choices=["horovod", "torch"], required=True)
    parser.add_argument("--results", required=True)
    parser.add_argument("--torch-timeout", type=float, default=0, help="init_process_group timeout; 0: torch's default")
    parser.add_argument("--ignore-sigterm", action="store_true",
                        help="measure the library alone: a launcher's SIGTERM cannot end the rank before it raises")
    args = parser.parse_args()
    if args.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)

    if args.api == "horovod":
        import horovod.torch as hvd
        hvd.init()
        rank = hvd.rank()

        def allreduce(t):
            return hvd.allreduce_(t, op=hvd.Sum, name="reliability.grad")
    else:
        import torch.distributed as dist
        kwargs = {"timeout": datetime.timedelta(seconds=args.torch_timeout)} if args.torch_timeout else {}
        dist.init_process_group("gloo", **kwargs)
        rank = dist.get_rank()

        def allreduce(t):
            dist.all_reduce(t)
            return t

    grad = torch.ones(1 << 20)  # 4 MiB
    record = {"rank": rank, "pid": os.getpid(), "steps": 0, "error": None}
    try:
        while True:
            grad.fill_(1.0)
            allreduce(grad)
            record["steps"] += 1
            if record["steps"] == 3:
                with open(os.path.join(args.results, f"{rank}.ready"), "w") as f:
                    json.dump({"pid": os.getpid()}, f)
    except BaseException as e:  # noqa: BLE001 - what the user sees is the point
        record["error_at"] = time.monotonic()
        record["error"] = f"{type(e).__module__}.{type(e).__name__}: {e}"[:2000]
        with open(os.path.join(args.results, f"{rank}.json"), "w") as f:
            json.dump(record, f)
        sys.exit(1)


if __name__ == "__main__":
    main()
