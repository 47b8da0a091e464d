"""Runs inside every worker: trains through dedicated servers while servers come and go.

With HERRING_TEST_ELASTIC=1, rank 0 starts a new server (python -m hvd_herring.server join) at
step 6, retires launched server 4 with hvd_herring.remove_server at step 14, and stops the joined
server with SIGTERM at step 22. Every worker records the server layout at each step and a hash of
its final weights in $HERRING_TEST_RESULTS/<rank>.json (rank 0 also the joined server's exit)."""

import hashlib
import json
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

STEPS = 30
LAUNCH_ONLY = ("HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE", "HOROVOD_CROSS_RANK",
               "HOROVOD_CROSS_SIZE", "HOROVOD_HOSTNAME")


def wait_for(predicate, seconds=60):
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("the server layout did not change in time")
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
        if elastic and hvd.rank() == 0 and step in (6, 14, 22):
            before = hvd_herring.server_layout()["shard_ranks"]
            # Keep stepping the others while the change is negotiated: poll between steps.
            layouts.append({"step": step, "before": before})
        layouts.append({"step": step, "shards": hvd_herring.server_layout()["shard_ranks"]})
    if joiner is not None:
        joiner_exit = joiner.wait(timeout=60)
    digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()
    with open(os.path.join(os.environ["HERRING_TEST_RESULTS"], f"{hvd.rank()}.json"), "w") as f:
        json.dump({"layouts": layouts, "digest": digest, "joiner_exit": joiner_exit,
                   "counters": hvd_herring.counters()}, f)
    hvd.shutdown()


if __name__ == "__main__":
    main()
