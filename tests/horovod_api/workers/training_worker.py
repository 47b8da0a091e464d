"""Runs inside every rank: trains a small model with Horovod's DistributedOptimizer (default
fusion, num_groups=, explicit groups=) and compares the weights with a single-process reference
trained on the concatenation of every rank's batches. Also records the engine counters at a
steady-state step, to prove that cached negotiation needs no coordinator round.

Writes $HERRING_TEST_RESULTS/<rank>.json."""

import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import horovod.torch as hvd
import api_checks
from checks import write_report

STEPS = 12
BATCH = 8


def model_for(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(20, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 4))


def batch(rank, step):
    g = torch.Generator().manual_seed(10_000 * step + rank)
    return torch.randn(BATCH, 20, generator=g), torch.randint(0, 4, (BATCH,), generator=g)


def fence():
    """A collective with a fixed name: after its first use it is served from the response cache.
    Counter snapshots taken between two fences see only what happened between them on every
    rank, because no rank can get past the next fence before every rank took its snapshot."""
    hvd.allreduce(torch.zeros(1), name="fence")


def train_distributed(variant):
    model = model_for(100 + hvd.rank())  # different on purpose: the broadcast must fix it
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    params = list(model.parameters())
    kwargs = {}
    if variant == "num_groups":
        kwargs["num_groups"] = 2
    elif variant == "groups":
        kwargs["groups"] = [params[:2], params[2:4], params[4:]]
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(), **kwargs)

    def run_step(step):
        x, y = batch(hvd.rank(), step)
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()

    return model, api_checks.train_with_counter_snapshots(STEPS, fence, run_step)


def train_reference():
    """One process, one model, every rank's batch at once: what data parallelism must equal."""
    model = model_for(100)  # rank 0's initial weights
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for step in range(STEPS):
        xs, ys = zip(*[batch(r, step) for r in range(hvd.size())])
        opt.zero_grad()
        F.cross_entropy(model(torch.cat(xs)), torch.cat(ys)).backward()
        opt.step()
    return model


def main():
    hvd.init()
    reference = train_reference()
    results = {}
    for variant in ("default", "num_groups", "groups"):
        model, counters = train_distributed(variant)
        diffs = [(p - q).abs().max().item() for p, q in zip(model.parameters(), reference.parameters())]
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        everyone = hvd.allgather(flat.unsqueeze(0), name=f"weights.{variant}")
        identical = all(torch.equal(everyone[0], everyone[r]) for r in range(hvd.size()))
        results[variant] = {"max_diff": max(diffs), "identical": identical, "counters": counters}
    write_report(hvd.rank(), {"results": results, "size": hvd.size()})
    hvd.shutdown()


if __name__ == "__main__":
    sys.exit(main())
