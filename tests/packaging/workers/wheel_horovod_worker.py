"""A rank of an unchanged Horovod script under `HOROVOD_BACKEND=herring horovodrun --gloo`, run from
the wheel's fresh venv (tests/packaging/test_wheel.py)."""

import os

import torch

import horovod.torch as hvd

hvd.init()
rank, size = hvd.rank(), hvd.size()
assert size == 2, size
assert "hvd_herring" in hvd.__name__ or "hvd_herring" in hvd.__file__, (hvd.__name__, hvd.__file__)

summed = hvd.allreduce(torch.full((1000,), float(rank + 1)), op=hvd.Sum, name="sum")
assert torch.equal(summed, torch.full((1000,), 3.0)), summed[:4]
averaged = hvd.allreduce(torch.full((5,), float(2 * rank)), name="avg")  # Average by default
assert averaged.tolist() == [1.0] * 5, averaged

b = torch.full((4,), float(rank))
hvd.broadcast_(b, root_rank=1, name="bcast")
assert b.tolist() == [1.0] * 4, b

g = hvd.allgather(torch.full((rank + 1, 2), float(rank)), name="gather")
assert g.tolist() == [[0.0, 0.0], [1.0, 1.0], [1.0, 1.0]], g

model = torch.nn.Linear(4, 1)
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                      named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
loss = model(torch.full((8, 4), float(rank + 1))).sum()
loss.backward()
optimizer.step()
weights = hvd.allgather(model.weight.detach().reshape(1, -1), name="weights")
assert torch.equal(weights[0], weights[1]), weights

hvd.shutdown()
print(f"WHEEL-HOROVOD-OK rank={rank} module={hvd.__name__} file={os.path.dirname(hvd.__file__)}", flush=True)
