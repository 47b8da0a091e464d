"""Runs inside every rank: (1) with fixed uneven batch sizes and the tuner's loss scale,
DistributedOptimizer training equals single-process training on the concatenated batches;
(2) a rank made slow gets a smaller share of the global batch after tuning."""

import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import horovod.torch as hvd
from checks import write_report

STEPS = 6


def model_for():
    torch.manual_seed(7)
    return nn.Sequential(nn.Linear(10, 16), nn.Tanh(), nn.Linear(16, 3))


def data(rank, step, n):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(n, 10, generator=g), torch.randint(0, 3, (n,), generator=g)


def main():
    hvd.init()
    n, r = hvd.size(), hvd.rank()
    tuner = hvd.BatchSizeTuner(global_batch_size=30, interval=3)
    tuner.sizes = [4 + 3 * k for k in range(n)]  # uneven on purpose
    tuner.sizes[-1] += tuner.global_batch_size - sum(tuner.sizes)

    model = model_for()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    for step in range(STEPS):
        x, y = data(r, step, tuner.local_batch_size)
        opt.zero_grad()
        (F.cross_entropy(model(x), y) * tuner.loss_scale()).backward()
        opt.step()
    reference = model_for()
    ropt = torch.optim.SGD(reference.parameters(), lr=0.1)
    for step in range(STEPS):
        xs, ys = zip(*[data(k, step, tuner.sizes[k]) for k in range(n)])
        ropt.zero_grad()
        F.cross_entropy(reference(torch.cat(xs)), torch.cat(ys)).backward()
        ropt.step()
    max_diff = max((p - q).abs().max().item() for p, q in zip(model.parameters(), reference.parameters()))

    # Speeds: the last rank is four times slower per sample.
    tuner = hvd.BatchSizeTuner(global_batch_size=60, interval=4)
    history = []
    for step in range(8):
        with tuner.timed():
            time.sleep(0.002 * tuner.local_batch_size * (4 if r == n - 1 else 1))
        tuner.step()
        history.append(list(tuner.sizes))
    write_report(r, {"max_diff": max_diff, "history": history})
    hvd.shutdown()


if __name__ == "__main__":
    main()
