"""Runs inside every worker of a job: R2SP training mode (hvd_herring.torch.R2SPTrainer) against a
single-process replay of the paper's schedule, then its input checks.

The replay applies the same updates in the same round-robin order (rank 0, 1, ..., N-1 per step),
each computed on the parameters its rank pulled after its previous push: every worker must end
with exactly the parameters the replay gives that worker.

HERRING_TEST_MODE=stall: the last rank stops before its step 3 for longer than
HOROVOD_STALL_SHUTDOWN_TIME_SECONDS; every rank must fail with the server's message naming it.
HERRING_TEST_MODE=uneven: the last rank takes one step fewer; the servers must say so.
"""

import json
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import horovod.torch as hvd

STEPS = 5
LR, MOMENTUM, DECAY = 0.05, 0.9, 1e-3


def model_for(seed):
    torch.manual_seed(seed)
    # About 1.1 M parameters: every shard spans several of the 1 MiB chunks that travel separately.
    return nn.Sequential(nn.Linear(12, 60000), nn.Tanh(), nn.Linear(60000, 5))


def batch(rank, step):
    g = torch.Generator().manual_seed(100 * step + rank)
    return torch.randn(16, 12, generator=g), torch.randn(16, 5, generator=g)


def gradient(model, rank, step):
    model.zero_grad()
    x, y = batch(rank, step)
    F.mse_loss(model(x), y).backward()
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def load(model, values):
    offset = 0
    for p in model.parameters():
        p.data.copy_(values[offset:offset + p.numel()].view_as(p))
        offset += p.numel()


def replay(n):
    """What every worker holds at the end, by the R2SP schedule, computed in one process."""
    model = model_for(0)  # rank 0's initial parameters: the ones broadcast
    server = flat(model).clone()
    velocity = torch.zeros_like(server)
    pulled = [server.clone() for _ in range(n)]
    lr, momentum, decay = (torch.tensor(v, dtype=torch.float32) for v in (LR, MOMENTUM, DECAY))
    for step in range(STEPS):
        for r in range(n):
            load(model, pulled[r])
            g = gradient(model, r, step)
            # One rounding per operation, as the servers' loop does it.
            g = g + decay * server
            velocity = momentum * velocity
            velocity = velocity + g
            server = server - lr * velocity
            pulled[r] = server.clone()
    return pulled


def train(rank, steps, pause_before=None):
    model = model_for(rank)  # every rank different: the trainer starts them all from rank 0's
    trainer = hvd.R2SPTrainer(model.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=DECAY)
    first = flat(model).clone()
    for step in range(steps):
        trainer.zero_grad()
        x, y = batch(rank, step)
        F.mse_loss(model(x), y).backward()
        if step == pause_before:
            time.sleep(float(os.environ.get("HERRING_TEST_PAUSE", "8")))
        trainer.step()
    trainer.close()
    return model, trainer, first


def input_checks():
    errors = {}
    try:
        hvd.R2SPTrainer(nn.Linear(3, 2).double().parameters(), lr=0.1)
    except ValueError as e:
        errors["float64"] = str(e)
    try:
        hvd.R2SPTrainer(nn.Linear(3, 2).parameters(), lr=0.0)
    except Exception as e:  # noqa: BLE001 - the engine's error type is HorovodInternalError
        errors["lr"] = str(e)
    trainer = hvd.R2SPTrainer(nn.Linear(3, 2).parameters(), lr=0.1)
    trainer.close()
    try:
        trainer.step()
    except RuntimeError as e:
        errors["closed"] = str(e)
    return errors


def main():
    # The replay recomputes every gradient in this process after training, and the training
    # diverges on purpose (every ulp is amplified): with several threads, the matrix products'
    # reductions may split differently under a different load and round differently.
    torch.set_num_threads(1)
    hvd.init()
    rank, n = hvd.rank(), hvd.size()
    results = os.environ["HERRING_TEST_RESULTS"]
    mode = os.environ.get("HERRING_TEST_MODE")
    if mode in ("stall", "uneven"):
        start = time.monotonic()
        last = rank == n - 1
        try:
            if mode == "stall":
                train(rank, STEPS, pause_before=2 if last else None)
            else:
                train(rank, STEPS - 1 if last else STEPS)
            outcome = "no error"
        except Exception as e:  # noqa: BLE001
            outcome = f"{type(e).__name__}: {e}"
        with open(os.path.join(results, f"{rank}.json"), "w") as f:
            json.dump({"error": outcome, "seconds": time.monotonic() - start}, f)
        return

    model, trainer, first = train(rank, STEPS)
    expected = replay(n)[rank]
    mine = flat(model)
    initial = flat(model_for(0))
    out = {
        "max_diff": (mine - expected).abs().max().item(),
        "bitwise": bool(torch.equal(mine, expected)),
        "started_from_rank0": bool(torch.equal(first, initial)),
        "moved": (mine - initial).abs().max().item(),
        "staleness_bound": trainer.staleness_bound,
        "layout": hvd.mpi_ops._basics.engine().server_layout(0),
        "errors": input_checks(),
    }
    with open(os.path.join(results, f"{rank}.json"), "w") as f:
        json.dump(out, f)
    hvd.shutdown()


if __name__ == "__main__":
    main()
