"""One allreduce benchmark, run inside every rank of one stack.

    --api horovod : Horovod's torch API (herring when HOROVOD_BACKEND=herring, else stock Horovod)
    --api torch   : torch.distributed with the gloo backend (what DDP uses on CPU)
    --api mpi     : MPI_Allreduce through mpi4py

Every iteration starts after a barrier and its time is the slowest rank's (a collective is done
when the last rank has its result). Rank 0 prints one JSON line per size."""

import argparse
import json
import time

import numpy as np


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--api", choices=["horovod", "torch", "mpi"], required=True)
    p.add_argument("--sizes", type=int, nargs="+", required=True, help="bytes of float32 per allreduce")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--label", default="")
    args = p.parse_args()

    if args.api == "mpi":
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        rank, size = comm.Get_rank(), comm.Get_size()
        barrier = comm.Barrier
        max_of = lambda v: comm.allreduce(v, op=MPI.MAX)  # noqa: E731

        def make(n):
            return np.ones(n, dtype=np.float32)

        def allreduce(buf, i):
            comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
    else:
        import torch
        torch.set_num_threads(1)
        if args.api == "horovod":
            import horovod.torch as hvd
            hvd.init()
            rank, size = hvd.rank(), hvd.size()
            barrier = lambda: hvd.allreduce(torch.zeros(1), name="bench.barrier")  # noqa: E731
            max_of = lambda v: hvd.allreduce(torch.tensor([v]), op=hvd.Max, name="bench.max").item()  # noqa: E731

            def allreduce(buf, i):
                hvd.allreduce_(buf, op=hvd.Sum, name=f"bench.{buf.numel()}")
        else:
            import torch.distributed as dist
            dist.init_process_group("gloo")
            rank, size = dist.get_rank(), dist.get_world_size()
            barrier = dist.barrier

            def max_of(v):
                t = torch.tensor([v])
                dist.all_reduce(t, op=dist.ReduceOp.MAX)
                return t.item()

            def allreduce(buf, i):
                dist.all_reduce(buf)

        def make(n):
            return torch.ones(n, dtype=torch.float32)

    for nbytes in args.sizes:
        buf = make(max(1, nbytes // 4))
        times = []
        for i in range(args.warmup + args.iters):
            barrier()
            start = time.perf_counter()
            allreduce(buf, i)
            elapsed = max_of(time.perf_counter() - start)
            if i >= args.warmup:
                times.append(elapsed)
        if rank == 0:
            print(json.dumps({"api": args.api, "label": args.label, "np": size, "bytes": nbytes,
                              "times": times, "median": float(np.median(times))}), flush=True)


if __name__ == "__main__":
    main()
