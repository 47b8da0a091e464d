"""One engine rank of the scale benchmark (benchmarks/scale): imports only hvd_herring's engine
front (no torch, no TensorFlow: numpy arrays go to the native engine by address), so hundreds of
ranks fit on this machine. Measures, on its own clock (all ranks share the machine's clock):

- when init() was called and when it returned (the harness adds when it launched the job);
- a cached tiny allreduce (8 float32) in lockstep: `warmup` untimed, then `iters` timed, each
  result checked against the exact reference (integer-valued floats: the sum is exact);
- optionally an in-place allreduce of `big_bytes` float32 (in place, so one buffer per rank:
  256 ranks x 64 MiB x 2 would not fit in this machine's memory), checked element by element;
- its sockets and resident memory from /proc (proc_sockets.py), and the engine's counters.

Writes <out_dir>/<rank>.json; a failing check is recorded there (the rank still meets the others
in every collective, so nobody waits for it), an exception exits non-zero with the rank named.

    scale_worker.py OUT_DIR WARMUP ITERS BIG_BYTES BIG_ITERS TIMEOUT_SECONDS"""

import json
import os
import sys
import time

started = time.time()
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import proc_sockets  # noqa: E402

TINY = 8


def reference_tiny(n):
    # rank r contributes r * TINY + i + 1 at element i
    i = np.arange(TINY, dtype=np.float64)
    return (TINY * n * (n - 1) / 2 + n * (i + 1)).astype(np.float32)


def main():
    out_dir, warmup, iters, big_bytes, big_iters, timeout = sys.argv[1:7]
    warmup, iters, big_bytes, big_iters, timeout = int(warmup), int(iters), int(big_bytes), int(big_iters), float(timeout)
    rank_env = os.environ.get("HOROVOD_RANK", "?")
    record = {"rank_env": rank_env, "pid": os.getpid(), "host": os.uname().nodename, "started": started}
    try:
        from hvd_herring import _native
        from hvd_herring.basics import basics
        record["imported"] = time.time()
        basics.init()
        record["init_returned"] = time.time()
        engine = basics.engine()
        rank, n = engine.rank, engine.size
        record.update(rank=rank, size=n, local_size=engine.local_size, cross_size=engine.cross_size)
        allreduce, f32, total = _native.OP_TYPES["allreduce"], _native.DTYPES["float32"], _native.REDUCE_OPS["Sum"]

        def run(name, src, dst):
            # waiter_follows: a synchronous call, as hvd.allreduce makes (the caller runs the cycle)
            handle = engine.enqueue_one(allreduce, name, 0, f32, total, 1.0, 1.0, -1,
                                        src.ctypes.data, dst.ctypes.data, list(src.shape), True)
            engine.wait(handle, timeout)

        src = (rank * TINY + np.arange(TINY) + 1).astype(np.float32)
        dst = np.zeros(TINY, np.float32)
        want = reference_tiny(n)
        times, wrong = [], None
        for k in range(warmup + iters):
            dst[:] = -1
            t0 = time.perf_counter()
            run("scale.tiny", src, dst)
            t1 = time.perf_counter()
            if k >= warmup:
                times.append(t1 - t0)
            if wrong is None and not np.array_equal(dst, want):
                wrong = f"iteration {k}: got {dst.tolist()}, expected {want.tolist()}"
        record["tiny"] = {"elements": TINY, "times": times, "ok": wrong is None, "error": wrong}
        record["sockets"] = proc_sockets.count()
        record["memory"] = proc_sockets.memory()
        if big_bytes:
            elements = big_bytes // 4
            buf = np.empty(elements, np.float32)
            want_big = np.float32(n * (n + 1) / 2)
            times, wrong = [], None
            for k in range(1 + big_iters):                 # one untimed warm-up
                buf.fill(rank + 1)
                t0 = time.perf_counter()
                run("scale.big", buf, buf)                 # in place
                t1 = time.perf_counter()
                if k:
                    times.append(t1 - t0)
                if wrong is None:
                    bad = np.flatnonzero(buf != want_big)
                    if bad.size:
                        wrong = f"iteration {k}: element {int(bad[0])} is {float(buf[bad[0]])}, expected {float(want_big)}"
            del buf
            record["big"] = {"bytes": elements * 4, "times": times, "ok": wrong is None, "error": wrong,
                             "in_place": True}
            record["memory_after_big"] = proc_sockets.memory()
            record["sockets_after_big"] = proc_sockets.count()
        record["counters"] = {k: v for k, v in basics.counters().items() if isinstance(v, (int, float))}
        basics.shutdown()
        record["shutdown"] = time.time()
    except BaseException as e:  # noqa: BLE001 - recorded with the rank, then re-raised
        record["error"] = f"rank {rank_env}: {type(e).__name__}: {e}"
        record["failed_at"] = time.time()           # the earliest failure is the cause, the rest echo it
        _write(out_dir, rank_env, record)
        raise
    _write(out_dir, rank_env, record)


def _write(out_dir, rank, record):
    path = os.path.join(out_dir, f"{rank}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(record, f)
    os.replace(path + ".tmp", path)


if __name__ == "__main__":
    main()
