"""Runs inside every worker: trains through dedicated servers while servers come and go.

With HERRING_TEST_ELASTIC=1, rank 0 starts a new server (python -m hvd_herring.server join) at
step 6, retires launched server 4 with hvd_herring.remove_server at step 14, and stops the joined
server with SIGTERM at step 22; every rank waits for each change before it trains on. Every
worker records the server layout at each step and a hash of its final weights in
$HERRING_TEST_RESULTS/<rank>.json (rank 0 also the joined server's exit)."""

import hashlib
import os
import signal
import subprocess
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import horovod.torch as hvd
import hvd_herring
from checks import write_report

STEPS = 30
LAUNCH_ONLY = ("HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE", "HOROVOD_CROSS_RANK",
               "HOROVOD_CROSS_SIZE", "HOROVOD_HOSTNAME")


# What rank 0 must see in the layout once the change started at that step has gone through.
CHANGED = {6: lambda shards: 6 in shards,
           14: lambda shards: 4 not in shards,
           22: lambda shards: 6 not in shards}


def settle(step, seconds=60):
    """Every rank runs one-element allreduces (no training) until rank 0 sees the change begun
    at `step`, so that it lands at the same step on any machine, however fast the steps are.
    Rank 0 decides for everyone (1: changed, 2: out of time), so all ranks leave together."""
    deadline = time.monotonic() + seconds
    while True:
        verdict = 0.0
        if hvd.rank() == 0:
            if CHANGED[step](hvd_herring.server_layout()["shard_ranks"]):
                verdict = 1.0
            elif time.monotonic() > deadline:
                verdict = 2.0
        verdict = hvd.allreduce(torch.tensor([verdict]), op=hvd.Sum, name="settle").item()
        if verdict == 1.0:
            return
        if verdict == 2.0:
            raise TimeoutError(f"the server layout did not change within {seconds} s of step {step}")
        time.sleep(0.05)


def main():
    hvd.init()
    elastic = os.environ.get("HERRING_TEST_ELASTIC") == "1"
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    g = torch.Generator().manual_seed(hvd.rank())
    layouts, joiner, joiner_exit = [], None, None
    for step in range(STEPS):
        if elastic and hvd.rank() == 0:
            if step == 6:
                env = {k: v for k, v in os.environ.items() if k not in LAUNCH_ONLY}
                env["HERRING_HOSTNAME"] = "simhost3"
                joiner = subprocess.Popen([sys.executable, "-m", "hvd_herring.server", "join"], env=env)
            elif step == 14:
                hvd_herring.remove_server(4)
            elif step == 22:
                joiner.send_signal(signal.SIGTERM)
        x, y = torch.randn(32, 256, generator=g), torch.randint(0, 10, (32,), generator=g)
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        if elastic and step in CHANGED:
            if hvd.rank() == 0:
                layouts.append({"step": step, "before": hvd_herring.server_layout()["shard_ranks"]})
            settle(step)
        layouts.append({"step": step, "shards": hvd_herring.server_layout()["shard_ranks"]})
    if joiner is not None:
        joiner_exit = joiner.wait(timeout=60)
    digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()
    write_report(hvd.rank(), {"layouts": layouts, "digest": digest, "joiner_exit": joiner_exit,
                             "counters": hvd_herring.counters()})
    hvd.shutdown()


if __name__ == "__main__":
    main()
