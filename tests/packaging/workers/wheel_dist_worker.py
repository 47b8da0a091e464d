"""A rank of a torch.distributed job on "herring", run by torchrun from the wheel's fresh venv
(tests/packaging/test_wheel.py): collectives with known results, and where hvd_herring came from."""

import os
import sys

import torch
import torch.distributed as dist

import hvd_herring
import hvd_herring.torch.distributed  # registers "herring"
from hvd_herring.torch import storage_hold

dist.init_process_group("herring")
rank, size = dist.get_rank(), dist.get_world_size()
assert size == 2, size

t = torch.full((1000,), float(rank + 1))
dist.all_reduce(t)
assert torch.equal(t, torch.full((1000,), 3.0)), t[:4]

i = torch.arange(10, dtype=torch.int64) * (rank + 1)
dist.all_reduce(i, op=dist.ReduceOp.MAX)
assert i.tolist() == [2 * k for k in range(10)], i

b = torch.full((3,), float(rank))
dist.broadcast(b, src=1)
assert b.tolist() == [1.0, 1.0, 1.0], b

gathered = [torch.zeros(2) for _ in range(size)]
dist.all_gather(gathered, torch.full((2,), float(rank)))
assert [g.tolist() for g in gathered] == [[0.0, 0.0], [1.0, 1.0]], gathered

dist.barrier()
dist.destroy_process_group()
print(f"WHEEL-DIST-OK rank={rank} package={os.path.dirname(hvd_herring.__file__)} "
      f"torch_native={storage_hold._torch_native is not None} python={sys.executable}", flush=True)
