"""One engine rank of the scale benchmark (benchmarks/scale): imports only hvd_herring's engine
front (no torch, no TensorFlow, no numpy: buffers are Python arrays handed to the native engine by
address), so hundreds of ranks fit on this machine and start quickly (numpy alone took 0.21 s of
CPU per process to import, its BLAS threads included; 256 ranks share 2 cores). Measures, on its
own clock (all ranks share the machine's clock):

- when init() was called and when it returned (the harness adds when it launched the job);
- a cached tiny allreduce (8 float32) in lockstep: `warmup` untimed, then `iters` timed, each
  result checked against the exact reference (integer-valued floats: the sum is exact);
- optionally an in-place allreduce of `big_bytes` float32 (in place, so one buffer per rank:
  256 ranks x 64 MiB x 2 would not fit in this machine's memory), checked element by element;
- its sockets and resident memory from /proc (proc_sockets.py), and the engine's counters.

Writes <out_dir>/<rank>.json; a failing check is recorded there (the rank still meets the others
in every collective, so nobody waits for it), an exception exits non-zero with the rank named.

    scale_worker.py OUT_DIR WARMUP ITERS BIG_BYTES BIG_ITERS TIMEOUT_SECONDS"""

import contextlib
import ctypes
import json
import os
import sys
import time
from array import array

started = time.time()
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import proc_sockets  # noqa: E402

TINY = 8
CHUNK = 1 << 20  # bytes: the large buffer is filled and checked a chunk at a time


def reference_tiny(n):
    """Rank r contributes r * TINY + i + 1 at element i: the exact float32 sums, as a list."""
    return list(array("f", [TINY * n * (n - 1) / 2 + n * (i + 1) for i in range(TINY)]))


def _address(buf):
    return buf.buffer_info()[0]


def _fill(buf, value):
    """Every element of the float32 array `buf` set to `value`, a chunk-sized pattern at a time."""
    pattern = array("f", [value]) * (CHUNK // 4)
    nbytes, at = len(buf) * 4, _address(buf)
    for offset in range(0, nbytes, CHUNK):
        ctypes.memmove(at + offset, _address(pattern), min(CHUNK, nbytes - offset))


def _first_difference(buf, value):
    """The index of the first element of `buf` that is not `value` (compared bytewise, a chunk at
    a time), or None."""
    pattern = (array("f", [value]) * (CHUNK // 4)).tobytes()
    view = memoryview(buf).cast("B")
    for offset in range(0, len(view), CHUNK):
        part = view[offset:offset + CHUNK]
        if part != pattern[:len(part)]:
            chunk = array("f", part.tobytes())
            return offset // 4 + next(i for i, v in enumerate(chunk) if v != value)
    return None


def context_switches():
    """(voluntary, involuntary) context switches of every thread of this process so far."""
    voluntary = involuntary = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches"):
                        voluntary += int(line.split()[1])
                    elif line.startswith("nonvoluntary_ctxt_switches"):
                        involuntary += int(line.split()[1])
        except FileNotFoundError:
            pass  # a thread that ended while we looked
    return voluntary, involuntary


def main():
    out_dir, warmup, iters, big_bytes, big_iters, timeout = sys.argv[1:7]
    warmup, iters, big_bytes, big_iters, timeout = int(warmup), int(iters), int(big_bytes), int(big_iters), float(timeout)
    rank_env = os.environ.get("HOROVOD_RANK", "?")
    record = {"rank_env": rank_env, "pid": os.getpid(), "host": os.uname().nodename, "started": started}
    with recorded(out_dir, rank_env, record):
        from hvd_herring import _native
        from hvd_herring.basics import basics
        record["imported"] = time.time()
        record["cpu_imported"] = time.process_time()     # this process's CPU so far, every thread
        basics.init()
        record["init_returned"] = time.time()
        record["cpu_init_returned"] = time.process_time()
        engine = basics.engine()
        rank, n = engine.rank, engine.size
        record.update(rank=rank, size=n, local_size=engine.local_size, cross_size=engine.cross_size)
        allreduce, f32, total = _native.OP_TYPES["allreduce"], _native.DTYPES["float32"], _native.REDUCE_OPS["Sum"]

        def run(name, src, dst):
            # waiter_follows: a synchronous call, as hvd.allreduce makes (the caller runs the cycle)
            handle = engine.enqueue_one(allreduce, name, 0, f32, total, 1.0, 1.0, -1,
                                        _address(src), _address(dst), [len(src)], True)
            engine.wait(handle, timeout)

        src = array("f", [rank * TINY + i + 1 for i in range(TINY)])
        dst = array("f", [0.0] * TINY)
        unset = array("f", [-1.0] * TINY)
        want = reference_tiny(n)
        times, wrong = [], None
        for k in range(warmup + iters):
            if k == warmup:
                cpu_before, switches_before = time.process_time(), context_switches()
            dst[:] = unset
            t0 = time.perf_counter()
            run("scale.tiny", src, dst)
            t1 = time.perf_counter()
            if k >= warmup:
                times.append(t1 - t0)
            if wrong is None and dst.tolist() != want:
                wrong = f"iteration {k}: got {dst.tolist()}, expected {want}"
        switches = [after - before for after, before in zip(context_switches(), switches_before)]
        record["tiny"] = {"elements": TINY, "times": times, "ok": wrong is None, "error": wrong,
                          # What a cycle costs this process: CPU and context switches per iteration.
                          "cpu_per_iteration_seconds": (time.process_time() - cpu_before) / max(iters, 1),
                          "voluntary_switches_per_iteration": switches[0] / max(iters, 1),
                          "involuntary_switches_per_iteration": switches[1] / max(iters, 1)}
        record["sockets"] = proc_sockets.count()
        record["memory"] = proc_sockets.memory()
        if big_bytes:
            elements = big_bytes // 4
            buf = array("f", bytes(elements * 4))
            want_big = float(n * (n + 1) // 2)            # exact in float32 for these N
            times, wrong = [], None
            for k in range(1 + big_iters):                 # one untimed warm-up
                _fill(buf, rank + 1)
                t0 = time.perf_counter()
                run("scale.big", buf, buf)                 # in place
                t1 = time.perf_counter()
                if k:
                    times.append(t1 - t0)
                if wrong is None:
                    bad = _first_difference(buf, want_big)
                    if bad is not None:
                        wrong = f"iteration {k}: element {bad} is {buf[bad]}, expected {want_big}"
            del buf
            record_big(record, elements * 4, times, wrong)
        record["counters"] = {k: v for k, v in basics.counters().items() if isinstance(v, (int, float))}
        basics.shutdown()
        record["shutdown"] = time.time()


def record_big(record, nbytes, times, wrong):
    """The large allreduce's part of the record, with the sockets and memory after it."""
    record["big"] = {"bytes": nbytes, "times": times, "ok": wrong is None, "error": wrong, "in_place": True}
    record["memory_after_big"] = proc_sockets.memory()
    record["sockets_after_big"] = proc_sockets.count()


@contextlib.contextmanager
def recorded(out_dir, rank_env, record):
    """Writes `record` to <out_dir>/<rank_env>.json when the block ends; an exception is recorded
    with the rank and the time first (the earliest failure is the cause, the rest echo it), then
    re-raised."""
    try:
        yield record
    except BaseException as e:  # noqa: BLE001 - recorded with the rank, then re-raised
        record["error"] = f"rank {rank_env}: {type(e).__name__}: {e}"
        record["failed_at"] = time.time()
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
