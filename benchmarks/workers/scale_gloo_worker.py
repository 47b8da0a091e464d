"""One rank of the Horovod-gloo peer in the scale benchmark: stock Horovod 0.28.1 built with
PyTorch (benchmarks/peers/setup_horovod_torch.sh), the same measurements as scale_worker.py
(init, a cached tiny allreduce in lockstep, an optional in-place large allreduce, sockets and
memory from /proc), the same record in <out_dir>/<rank>.json.

    scale_gloo_worker.py OUT_DIR WARMUP ITERS BIG_BYTES BIG_ITERS TIMEOUT_SECONDS"""

import os
import sys
import time

started = time.time()
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import proc_sockets  # noqa: E402
from scale_worker import TINY, record_big, recorded, reference_tiny  # noqa: E402


def main():
    out_dir, warmup, iters, big_bytes, big_iters, _timeout = sys.argv[1:7]
    warmup, iters, big_bytes, big_iters = int(warmup), int(iters), int(big_bytes), int(big_iters)
    rank_env = os.environ.get("HOROVOD_RANK", "?")
    record = {"rank_env": rank_env, "pid": os.getpid(), "host": os.uname().nodename, "started": started}
    with recorded(out_dir, rank_env, record):
        import torch
        import horovod.torch as hvd
        torch.set_num_threads(1)
        record["imported"] = time.time()
        hvd.init()
        record["init_returned"] = time.time()
        rank, n = hvd.rank(), hvd.size()
        record.update(rank=rank, size=n, local_size=hvd.local_size(), cross_size=hvd.cross_size())
        src = (rank * TINY + torch.arange(TINY) + 1).to(torch.float32)
        want = torch.tensor(reference_tiny(n), dtype=torch.float32)
        times, wrong = [], None
        for k in range(warmup + iters):
            t0 = time.perf_counter()
            out = hvd.allreduce(src, op=hvd.Sum, name="scale.tiny")
            t1 = time.perf_counter()
            if k >= warmup:
                times.append(t1 - t0)
            if wrong is None and not torch.equal(out, want):
                wrong = f"iteration {k}: got {out.tolist()}, expected {want.tolist()}"
        record["tiny"] = {"elements": TINY, "times": times, "ok": wrong is None, "error": wrong}
        record["sockets"] = proc_sockets.count()
        record["memory"] = proc_sockets.memory()
        if big_bytes:
            buf = torch.empty(big_bytes // 4, dtype=torch.float32)
            want_big = float(n * (n + 1) / 2)
            times, wrong = [], None
            for k in range(1 + big_iters):
                buf.fill_(rank + 1)
                t0 = time.perf_counter()
                hvd.allreduce_(buf, op=hvd.Sum, name="scale.big")
                t1 = time.perf_counter()
                if k:
                    times.append(t1 - t0)
                if wrong is None:
                    bad = (buf != want_big).nonzero()
                    if bad.numel():
                        i = int(bad[0][0])
                        wrong = f"iteration {k}: element {i} is {float(buf[i])}, expected {want_big}"
            del buf
            record_big(record, big_bytes // 4 * 4, times, wrong)
        hvd.shutdown()
        record["shutdown"] = time.time()


if __name__ == "__main__":
    main()
