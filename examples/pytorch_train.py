"""Data-parallel training of a small CNN with Horovod's PyTorch API.

An ordinary Horovod script: run it with stock Horovod, or on the herring engine with
    HOROVOD_BACKEND=herring horovodrun --gloo -np 4 -H localhost:4 python examples/pytorch_train.py

The data is synthetic (no downloads): ten random prototype images, and samples that are a
prototype plus noise, labelled by their prototype, so the model has something real to learn. Every rank starts from different random weights; the
broadcast makes them equal, DistributedOptimizer keeps them equal, and the script checks that at
the end.
"""

import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import horovod.torch as hvd
from example_training import add_num_groups, finish, rank_shard, training_parser


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3)
        self.conv2 = nn.Conv2d(16, 32, 3)
        self.fc1 = nn.Linear(32 * 5 * 5, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(torch.flatten(x, 1)))
        return self.fc2(x)


def synthetic_dataset(samples, seed=1234):
    """The same data on every rank: noisy copies of ten prototype images, labelled by prototype."""
    g = torch.Generator().manual_seed(seed)
    prototypes = torch.randn(10, 1, 28, 28, generator=g)
    y = torch.randint(0, 10, (samples,), generator=g)
    x = prototypes[y] + 2.0 * torch.randn(samples, 1, 28, 28, generator=g)
    return x, y


def metric_average(value, name):
    return hvd.allreduce(torch.tensor(value), name=name).item()


def main():
    parser = training_parser(__doc__)
    add_num_groups(parser)
    args = parser.parse_args()

    hvd.init()
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // hvd.local_size()))

    x, y = rank_shard(hvd, *synthetic_dataset(args.samples))

    torch.manual_seed(100 + hvd.rank())  # deliberately different starting weights per rank
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         num_groups=args.num_groups)

    steps = len(x) // args.batch_size
    for epoch in range(1, args.epochs + 1):
        model.train()
        start = time.perf_counter()
        total_loss, correct = 0.0, 0
        for step in range(steps):
            xb = x[step * args.batch_size:(step + 1) * args.batch_size]
            yb = y[step * args.batch_size:(step + 1) * args.batch_size]
            optimizer.zero_grad()
            out = model(xb)
            loss = F.cross_entropy(out, yb)
            loss.backward()
            optimizer.step()
            total_loss += loss.item()
            correct += (out.argmax(dim=1) == yb).sum().item()
        loss = metric_average(total_loss / steps, "epoch_loss")
        accuracy = metric_average(correct / (steps * args.batch_size), "epoch_accuracy")
        if hvd.rank() == 0:
            print(f"epoch {epoch}: loss {loss:.4f}  accuracy {accuracy:.3f}  "
                  f"({time.perf_counter() - start:.1f} s, {hvd.size()} ranks)", flush=True)

    # Every rank must hold exactly the same weights.
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    gathered = hvd.allgather(flat.unsqueeze(0))
    finish(hvd, gathered, torch.equal)


if __name__ == "__main__":
    main()
