"""hvd.SyncBatchNorm (also horovod.torch.sync_batch_norm.SyncBatchNorm): Horovod's module, which
trains on CPU tensors too.

Horovod's SyncBatchNorm refuses CPU input because torch's batch-norm primitives exist for GPUs
only; this one runs the same algorithm on batch_norm_cpu's primitives, plain tensor operations.
In the forward pass every rank's per-channel (mean, invstd, count) are allgathered and combined
into the global statistics; in the backward pass the per-channel sum(dy) and sum(dy * (x - mean))
are allreduced. Each is one collective of one tensor (the statistics packed together, as torch's
own SyncBatchNorm packs them), so a layer costs one small allgather forward and one small
allreduce backward. Named by the channel count, so that layers of one width share a
response-cache entry (one fixed name for layers of different widths would evict it at every
layer)."""

import torch
from torch.autograd.function import Function
from torch.nn.modules.batchnorm import _BatchNorm

from hvd_herring.torch import batch_norm_cpu as cpu
from hvd_herring.torch.mpi_ops import Sum, allgather, allreduce, size


class SyncBatchNorm(_BatchNorm):
    """Batch norm whose training statistics are those of the global batch (every rank's samples).
    Same arguments as Horovod's hvd.SyncBatchNorm and torch's BatchNorm2d; any input of at least
    two dimensions (N, C, ...)."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def forward(self, input):
        self._check_input_dim(input)
        momentum = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            self.num_batches_tracked = self.num_batches_tracked + 1
            if self.momentum is None:  # a cumulative moving average, as torch's BatchNorm
                momentum = 1.0 / float(self.num_batches_tracked)
        if (not self.training and self.track_running_stats) or size() == 1:
            return torch.nn.functional.batch_norm(
                input, self.running_mean, self.running_var, self.weight, self.bias,
                self.training or not self.track_running_stats, momentum, self.eps)
        return _SyncBatchNormCpu.apply(input, self.weight, self.bias, self.running_mean, self.running_var,
                                       self.eps, momentum)


class _SyncBatchNormCpu(Function):
    @staticmethod
    def forward(ctx, input, weight, bias, running_mean, running_var, eps, momentum):
        input = input.contiguous()
        channels = input.size(1)
        mean, invstd = cpu.batch_norm_stats(input, eps)
        count = torch.full((1,), input.numel() // channels, dtype=mean.dtype)
        gathered = allgather(torch.cat([mean, invstd, count]).unsqueeze(0), name=f"sync_batch_norm.stats.{channels}")
        mean_all, invstd_all, count_all = torch.split(gathered, [channels, channels, 1], dim=1)
        count_all = count_all.reshape(-1)
        mean, invstd = cpu.batch_norm_gather_stats_with_counts(input, mean_all, invstd_all, running_mean,
                                                               running_var, momentum, eps, count_all)
        ctx.save_for_backward(input, weight, mean, invstd, count_all)
        return cpu.batch_norm_elemt(input, weight, bias, mean, invstd, eps)

    @staticmethod
    def backward(ctx, grad_output):
        grad_output = grad_output.contiguous()
        input, weight, mean, invstd, count_all = ctx.saved_tensors
        need_input, need_weight, need_bias = ctx.needs_input_grad[0:3]
        sum_dy, sum_dy_xmu, grad_weight, grad_bias = cpu.batch_norm_backward_reduce(
            grad_output, input, mean, invstd, weight, need_input, need_weight, need_bias)
        grad_input = None
        if need_input:
            channels = input.size(1)
            sums = allreduce(torch.cat([sum_dy, sum_dy_xmu]), op=Sum, name=f"sync_batch_norm.sums.{channels}")
            sum_dy, sum_dy_xmu = torch.split(sums, [channels, channels])
            grad_input = cpu.batch_norm_backward_elemt(grad_output, input, mean, invstd, weight, sum_dy,
                                                       sum_dy_xmu, count_all)
        # The weight and bias gradients stay local: the optimizer allreduces them with the others.
        return grad_input, grad_weight, grad_bias, None, None, None, None


__all__ = ["SyncBatchNorm"]
