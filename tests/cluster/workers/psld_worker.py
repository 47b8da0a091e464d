"""Runs inside every worker (dedicated servers never return from hvd.init): trains with
DistributedOptimizer through dedicated server shards, one of which HERRING_SLOWDOWN makes slow.
Records the step times, the shards' shares over time, and a hash of the final weights, in
$HERRING_TEST_RESULTS/<rank>.json."""

import hashlib
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import horovod.torch as hvd
import hvd_herring
from checks import write_report

STEPS = int(os.environ.get("HERRING_TEST_STEPS", "40"))


def main():
    hvd.init()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    g = torch.Generator().manual_seed(hvd.rank())
    step_times, shares = [], []
    for step in range(STEPS):
        x, y = torch.randn(16, 512, generator=g), torch.randint(0, 10, (16,), generator=g)
        start = time.perf_counter()
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        step_times.append(time.perf_counter() - start)
        layout = hvd_herring.server_layout()
        shares.append([layout["version"], layout["shares"]])
    digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()
    layout = hvd_herring.server_layout()
    write_report(hvd.rank(), {"step_times": step_times, "shares": shares, "digest": digest, "layout": layout,
                             "counters": hvd_herring.counters()})
    hvd.shutdown()


if __name__ == "__main__":
    main()
