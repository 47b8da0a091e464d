"""torch.nn.SyncBatchNorm's algorithm for CPU tensors, the peer of hvd.SyncBatchNorm in the
SyncBatchNorm benchmark: torch's module refuses CPU input (its primitives exist for GPUs only), so
the torch-gloo stack runs what nn.SyncBatchNorm runs (torch/nn/modules/_functions.py): forward,
one all_gather_into_tensor of every rank's packed (mean, invstd, count); backward, one all_reduce of
the packed (sum_dy, sum_dy_xmu); over torch.distributed's default group, on the same CPU
primitives as herring's (hvd_herring.torch.batch_norm_cpu), so only the communication differs."""

import torch
import torch.distributed as dist
from torch.autograd.function import Function
from torch.nn.modules.batchnorm import _BatchNorm

from hvd_herring.torch import batch_norm_cpu as cpu


class SyncBatchNorm(_BatchNorm):
    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def forward(self, input):
        self._check_input_dim(input)
        momentum = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:
                momentum = 1.0 / float(self.num_batches_tracked)
        if (not self.training and self.track_running_stats) or dist.get_world_size() == 1:
            return torch.nn.functional.batch_norm(input, self.running_mean, self.running_var, self.weight,
                                                  self.bias, self.training or not self.track_running_stats,
                                                  momentum, self.eps)
        return _Function.apply(input, self.weight, self.bias, self.running_mean, self.running_var, self.eps,
                               momentum)


class _Function(Function):
    @staticmethod
    def forward(ctx, input, weight, bias, running_mean, running_var, eps, momentum):
        input = input.contiguous()
        channels, world = input.size(1), dist.get_world_size()
        mean, invstd = cpu.batch_norm_stats(input, eps)
        count = torch.full((1,), input.numel() // channels, dtype=mean.dtype)
        combined = torch.cat([mean, invstd, count])
        gathered = torch.empty(world * combined.numel(), dtype=combined.dtype)
        dist.all_gather_into_tensor(gathered, combined)
        mean_all, invstd_all, count_all = torch.split(gathered.view(world, -1), [channels, channels, 1], dim=1)
        count_all = count_all.reshape(-1)
        mean, invstd = cpu.batch_norm_gather_stats_with_counts(input, mean_all, invstd_all, running_mean,
                                                               running_var, momentum, eps, count_all)
        ctx.save_for_backward(input, weight, mean, invstd, count_all)
        return cpu.batch_norm_elemt(input, weight, bias, mean, invstd, eps)

    @staticmethod
    def backward(ctx, grad_output):
        grad_output = grad_output.contiguous()
        input, weight, mean, invstd, count_all = ctx.saved_tensors
        sum_dy, sum_dy_xmu, grad_weight, grad_bias = cpu.batch_norm_backward_reduce(
            grad_output, input, mean, invstd, weight, *ctx.needs_input_grad[0:3])
        grad_input = None
        if ctx.needs_input_grad[0]:
            channels = input.size(1)
            combined = torch.cat([sum_dy, sum_dy_xmu])
            dist.all_reduce(combined)
            sum_dy, sum_dy_xmu = torch.split(combined, [channels, channels])
            grad_input = cpu.batch_norm_backward_elemt(grad_output, input, mean, invstd, weight, sum_dy,
                                                       sum_dy_xmu, count_all)
        return grad_input, grad_weight, grad_bias, None, None, None, None
