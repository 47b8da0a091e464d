"""torch.nn.SyncBatchNorm's algorithm for CPU tensors, the peer of hvd.SyncBatchNorm in the
SyncBatchNorm benchmark: torch's module refuses CPU input (its primitives exist for GPUs only), so
the torch-gloo stack runs what nn.SyncBatchNorm runs (torch/nn/modules/_functions.py): forward,
one all_gather_into_tensor of every rank's packed (mean, invstd, count); backward, one all_reduce
of the packed (sum_dy, sum_dy_xmu); over torch.distributed's default group. The algorithm and its
CPU primitives are herring's (hvd_herring.torch.batch_norm_cpu), so only the communication
differs between the two stacks."""

import torch
import torch.distributed as dist

from hvd_herring.torch.batch_norm_cpu import SynchronizedBatchNorm


class SyncBatchNorm(SynchronizedBatchNorm):
    def world_size(self):
        return dist.get_world_size()

    def gather_statistics(self, packed):
        gathered = torch.empty(self.world_size() * packed.numel(), dtype=packed.dtype)
        dist.all_gather_into_tensor(gathered, packed)
        return gathered.view(self.world_size(), -1)

    def sum_over_ranks(self, packed):
        dist.all_reduce(packed)
        return packed
