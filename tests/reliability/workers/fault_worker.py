"""Runs inside every rank: trains, and the rank named by HERRING_TEST_VICTIM (or each of a
comma-separated list: a whole host) kills itself with SIGKILL at step 5. The survivors must get an error naming the lost rank within the deadline; they
record what they saw in $HERRING_TEST_RESULTS/<rank>.json and exit non-zero.

horovodrun terminates the remaining workers when one fails (SIGTERM, then SIGKILL 5 s later), so
the survivors defer SIGTERM while they report: the engine must have raised long before."""

import os
import signal
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import horovod.torch as hvd
from checks import write_report

terminated = []
signal.signal(signal.SIGTERM, lambda *_: terminated.append(time.monotonic()))


def main():
    hvd.init()
    victims = {int(v) for v in os.environ["HERRING_TEST_VICTIM"].split(",")}
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    outcome = {"rank": hvd.rank()}
    kill_no_earlier_than = None
    try:
        for step in range(10_000):
            if step == 5 and hvd.rank() in victims:
                os.kill(os.getpid(), signal.SIGKILL)
            if step == 4:
                # The victim dies after finishing step 4, which it cannot finish before every rank
                # has started it: time from here bounds the time from the kill from above. (A
                # survivor can still be in step 4 when the victim dies, so step 5 is too late.)
                kill_no_earlier_than = time.monotonic()
            x = torch.randn(32, 64)
            y = torch.randint(0, 10, (32,))
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
        outcome["error"] = None
    except Exception as e:  # noqa: BLE001 - the point is to see what the user sees
        outcome["error"] = f"{type(e).__name__}: {e}"
        outcome["seconds_to_error"] = time.monotonic() - kill_no_earlier_than if kill_no_earlier_than else None
    outcome["sigterm_before_error"] = bool(terminated) and kill_no_earlier_than is not None and \
        terminated[0] < kill_no_earlier_than + outcome.get("seconds_to_error", 0)
    write_report(hvd.rank(), outcome)
    sys.exit(1 if outcome["error"] else 0)


if __name__ == "__main__":
    main()
