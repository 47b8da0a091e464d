"""An unchanged-Horovod-style elastic torch script (hvd.elastic.run, hvd.elastic.TorchState,
hvd.DistributedOptimizer) that also carries out a scenario of tests/elastic/workers/elastic_common.py.

Environment: HERRING_TEST_RESULTS (directory for logs and markers), HERRING_TEST_SCENARIO,
HERRING_TEST_HOSTS_FILE (the discovery output the driver reads), HOROVOD_DYNAMIC_PROCESS_SETS=1.
The committed state carries `history`, the (step, size) of every committed step, from which the
test recomputes the weights. Each round also allreduces on a process set of its even ranks."""

import sys

import torch

import horovod.torch as hvd

import elastic_common as common


def main():
    hvd.init()
    model = torch.nn.Linear(common.IN_FEATURES, 1, dtype=torch.float64)
    w, b = common.initial_weights()
    with torch.no_grad():
        model.weight.copy_(torch.from_numpy(w.T))
        model.bias.copy_(torch.from_numpy(b))
    optimizer = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=common.LR, momentum=common.MOMENTUM),
        named_parameters=model.named_parameters())
    state = hvd.elastic.TorchState(model, optimizer, step=0, history=[])

    def train_step(step, mid_step, evens):
        x, y = common.batch(step, hvd.rank())
        optimizer.zero_grad()
        loss = torch.mean((model(torch.from_numpy(x)) - torch.from_numpy(y)) ** 2)
        mid_step()                      # a scripted failure happens here, before the allreduce
        loss.backward()
        optimizer.step()
        if not evens.included():
            return {}
        # A collective on the round's process set, checked by the test: step + 1 from each member.
        total = hvd.allreduce(torch.tensor([step + 1.0], dtype=torch.float64), op=hvd.Sum,
                              process_set=evens, name="evens")
        return {"evens_sum": float(total[0]), "evens_size": evens.size()}

    @hvd.elastic.run
    def train(state):
        # The even ranks of this round's membership. A reset re-initializes without the sets of
        # the round before (Horovod's elastic semantics), so each round adds its own.
        evens = hvd.add_process_set(range(0, hvd.size(), 2))
        scenario.train(state, lambda step, mid_step: train_step(step, mid_step, evens))

    scenario = common.Scenario(hvd)
    train(state)
    scenario.finish(state, model.weight.detach().numpy().T, model.bias.detach().numpy())


if __name__ == "__main__":
    main()
    sys.exit(0)
