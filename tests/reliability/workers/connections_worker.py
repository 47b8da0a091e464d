"""Engine-only worker (numpy, no torch or TF, so many ranks fit on 2 cores) for lazy connections
(HERRING_CONNECTIONS): times hvd.init(), runs allreduces on the PS path (large) and the host-sums
path (small), checks every value against its reference, and writes this rank's result with the
transport's socket counters to $CONN_RESULTS/rank<r>.json.

CONN_KILL=<rank>: that rank dies (SIGKILL) just before its third large allreduce; the others
must fail naming it, within the deadline, and record the error."""

import json
import os
import signal
import sys
import time

import numpy as np

start = time.monotonic()
from hvd_herring.basics import DTYPES, basics  # noqa: E402

basics.init()
init_seconds = time.monotonic() - start
rank, size = basics.rank(), basics.size()
result = {"rank": rank, "size": size, "local_rank": basics.local_rank(), "local_size": basics.local_size(),
          "cross_size": basics.cross_size(), "init_seconds": init_seconds,
          "after_init": dict(basics.counters())}
kill = int(os.environ.get("CONN_KILL", "-1"))
out_dir = os.environ["CONN_RESULTS"]


def allreduce(name, count, value):
    x = np.full(count, value, dtype=np.float32)
    out = np.empty_like(x)
    handle = basics.enqueue_one("allreduce", name, 0, DTYPES["float32"], basics.Sum, 1.0, 1.0, -1,
                                x.ctypes.data, out.ctypes.data, list(x.shape))
    basics.wait_simple(handle)
    return out


try:
    expected = size * (size + 1) / 2
    for step in range(4):
        if rank == kill and step == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        big = allreduce("big", (1 << 20) + 17, rank + 1)       # 4 MiB: cut over the server shards
        small = allreduce("small", 256, (rank + 1) * (step + 1))  # 1 KiB: host sums, host to host
        if not (np.all(big == expected) and np.all(small == expected * (step + 1))):
            raise AssertionError(f"rank {rank} step {step}: big {big[:3]} small {small[:3]}, expected "
                                 f"{expected} and {expected * (step + 1)}")
    # Read before anyone can leave: a peer that shut down (goodbye) closes its sockets with us.
    result["counters"] = dict(basics.counters())
    allreduce("done", 1, 1)
    result["ok"] = True
except Exception as e:  # the fault case: the error must name the killed rank
    result["ok"] = False
    result["error"] = f"{type(e).__name__}: {e}"
result.setdefault("counters", dict(basics.counters()))
with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
    json.dump(result, f)
try:
    basics.shutdown()
except Exception:
    pass
sys.exit(0 if result["ok"] or kill >= 0 else 1)
