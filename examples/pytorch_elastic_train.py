"""Elastic data-parallel training with Horovod's PyTorch API: workers may join, leave or fail
while it trains (see docs/elastic.md). An ordinary Horovod elastic script; on the herring engine:

    printf 'localhost:2\n' > hosts.txt; printf '#!/bin/sh\ncat hosts.txt\n' > discover.sh; chmod +x discover.sh
    HOROVOD_BACKEND=herring horovodrun -np 2 --min-np 1 --max-np 4 --network-interface lo \
        --host-discovery-script ./discover.sh python examples/pytorch_elastic_train.py
    # meanwhile, another host (here: another name of this machine) comes and goes:
    printf 'localhost:2\n127.0.0.1:2\n' > hosts.txt

The data is synthetic (a noisy linear function); ElasticSampler hands each rank its share of the
samples not yet processed in the epoch, whatever the number of ranks."""

import argparse
import time

import torch

import horovod.torch as hvd


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--batch-seconds", type=float, default=0.05, help="pause per batch, to watch changes")
    args = parser.parse_args()

    hvd.init()
    torch.manual_seed(0)
    x = torch.randn(4096, 16)
    y = x @ torch.linspace(-1, 1, 16)[:, None] + 0.1 * torch.randn(4096, 1)
    dataset = torch.utils.data.TensorDataset(x, y)
    sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=0)
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)

    model = torch.nn.Linear(16, 1)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                                         named_parameters=model.named_parameters())
    state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, batch=0)

    @hvd.elastic.run
    def train(state):
        print(f"rank {hvd.rank()} of {hvd.size()} starts at epoch {state.epoch}, batch {state.batch}",
              flush=True)
        for state.epoch in range(state.epoch, args.epochs):
            for state.batch, (xb, yb) in enumerate(loader, start=state.batch):
                optimizer.zero_grad()
                loss = torch.nn.functional.mse_loss(model(xb), yb)
                loss.backward()
                optimizer.step()
                state.sampler.record_batch(state.batch, args.batch_size)
                time.sleep(args.batch_seconds)
                if state.batch % 10 == 0:
                    state.commit()  # also where a host change interrupts training
            if hvd.rank() == 0:
                print(f"epoch {state.epoch}: loss {loss.item():.4f} with {hvd.size()} workers", flush=True)
            state.batch = 0
            state.sampler.set_epoch(state.epoch + 1)
            state.commit()

    train(state)
    if hvd.rank() == 0:
        print("done", flush=True)


if __name__ == "__main__":
    main()
