"""The five batch-norm primitives that synchronized batch norm is built from (torch.batch_norm_stats,
batch_norm_gather_stats_with_counts, batch_norm_elemt, batch_norm_backward_reduce,
batch_norm_backward_elemt), for CPU tensors: torch has them for GPUs only, so SyncBatchNorm,
Horovod's and torch's alike, cannot train on a CPU. Same arguments and results as torch's, written
with ordinary tensor operations; statistics are accumulated in float32 at least (float64 stays
float64), as torch's kernels do for half precision.

Channels are dimension 1 of an (N, C, ...) input; "per channel" reduces every other dimension.
SynchronizedBatchNorm, at the end, is the algorithm over them, for any carrier of collectives."""

import torch
from torch.autograd.function import Function
from torch.nn.modules.batchnorm import _BatchNorm


def _acc(t):
    return t if t.dtype == torch.float64 else t.float()


def _shape(input):
    """The shape that makes a per-channel (C,) tensor broadcast against the (N, C, ...) input."""
    return (1, input.size(1)) + (1,) * (input.dim() - 2)


def _dims(input):
    return [d for d in range(input.dim()) if d != 1]


def batch_norm_stats(input, eps):
    """This rank's per-channel mean and 1/sqrt(biased variance + eps)."""
    # Two passes (the mean, then the squared deviations from it): exact as Welford's, and ten
    # times faster on CPU than torch.var_mean over the non-channel dimensions.
    x, dims = _acc(input), _dims(input)
    mean = x.mean(dims)
    xmu = x - mean.view(_shape(input))
    return mean, torch.rsqrt((xmu * xmu).mean(dims) + eps)


def batch_norm_gather_stats_with_counts(input, mean_all, invstd_all, running_mean, running_var, momentum, eps,
                                        counts):
    """Combines every rank's (mean, invstd, count) into the global mean and invstd (the parallel
    variance formula), and updates the running statistics with the unbiased global variance."""
    counts = counts.to(mean_all.dtype).view(-1, 1)
    total = counts.sum()
    mean = (counts * mean_all).sum(0) / total
    var_all = 1.0 / (invstd_all * invstd_all) - eps
    var = (counts * (var_all + (mean_all - mean) ** 2)).sum(0) / total
    if running_mean is not None:
        running_mean.mul_(1 - momentum).add_(mean.to(running_mean.dtype), alpha=momentum)
    if running_var is not None:
        unbiased = var * (total / (total - 1)) if float(total) > 1 else var
        running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype), alpha=momentum)
    return mean, torch.rsqrt(var + eps)


def batch_norm_elemt(input, weight, bias, mean, invstd, eps):
    """(input - mean) * invstd * weight + bias, per channel."""
    shape = _shape(input)
    scale = invstd if weight is None else invstd * _acc(weight)
    out = (_acc(input) - mean.view(shape)) * scale.view(shape)
    if bias is not None:
        out = out + _acc(bias).view(shape)
    return out.to(input.dtype)


def batch_norm_backward_reduce(grad_output, input, mean, invstd, weight, input_g, weight_g, bias_g):
    """This rank's per-channel sum(dy) and sum(dy * (x - mean)), and the weight and bias gradients
    they give (None where not asked for)."""
    dims, shape = _dims(input), _shape(input)
    dy = _acc(grad_output)
    sum_dy = dy.sum(dims)
    sum_dy_xmu = (dy * (_acc(input) - mean.view(shape))).sum(dims)
    grad_weight = (sum_dy_xmu * invstd).to(weight.dtype) if weight is not None and weight_g else None
    grad_bias = sum_dy.to(weight.dtype) if weight is not None and bias_g else None
    return sum_dy, sum_dy_xmu, grad_weight, grad_bias


def batch_norm_backward_elemt(grad_output, input, mean, invstd, weight, sum_dy, sum_dy_xmu, count):
    """The input gradient from the global sums (every rank's, allreduced) over `count` elements
    per rank."""
    shape = _shape(input)
    total = count.to(sum_dy.dtype).sum()
    mean_dy, mean_dy_xmu = (sum_dy / total).view(shape), (sum_dy_xmu / total).view(shape)
    inv = invstd.view(shape)
    scale = inv if weight is None else inv * _acc(weight).view(shape)
    xmu = _acc(input) - mean.view(shape)
    grad = (_acc(grad_output) - mean_dy - xmu * inv * inv * mean_dy_xmu) * scale
    return grad.to(input.dtype)


class SynchronizedBatchNorm(_BatchNorm):
    """Synchronized batch norm on these primitives, whatever carries its collectives: subclasses
    say how many ranks there are and how the packed statistics travel. Forward: this rank's
    per-channel (mean, invstd, count), packed into one (2C+1,) tensor, gathered from every rank
    into (ranks, 2C+1), combined into the global statistics. Backward: the per-channel (sum_dy,
    sum_dy_xmu), packed into one (2C,) tensor, summed over the ranks. The weight and bias
    gradients stay local: data-parallel training allreduces them with the other gradients."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)

    def world_size(self):
        raise NotImplementedError

    def gather_statistics(self, packed):
        """(2C+1,) from this rank -> (ranks, 2C+1), in rank order."""
        raise NotImplementedError

    def sum_over_ranks(self, packed):
        """(2C,) from this rank -> the (2C,) sum over every rank."""
        raise NotImplementedError

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def forward(self, input):
        self._check_input_dim(input)
        momentum = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # a cumulative moving average, as torch's BatchNorm
                momentum = 1.0 / float(self.num_batches_tracked)
        if (not self.training and self.track_running_stats) or self.world_size() == 1:
            return torch.nn.functional.batch_norm(
                input, self.running_mean, self.running_var, self.weight, self.bias,
                self.training or not self.track_running_stats, momentum, self.eps)
        return _SynchronizedBatchNorm.apply(input, self.weight, self.bias, self.running_mean, self.running_var,
                                            self.eps, momentum, self)


class _SynchronizedBatchNorm(Function):
    @staticmethod
    def forward(ctx, input, weight, bias, running_mean, running_var, eps, momentum, module):
        input = input.contiguous()
        channels = input.size(1)
        mean, invstd = batch_norm_stats(input, eps)
        count = torch.full((1,), input.numel() // channels, dtype=mean.dtype)
        gathered = module.gather_statistics(torch.cat([mean, invstd, count]))
        mean_all, invstd_all, count_all = torch.split(gathered, [channels, channels, 1], dim=1)
        count_all = count_all.reshape(-1)
        mean, invstd = batch_norm_gather_stats_with_counts(input, mean_all, invstd_all, running_mean, running_var,
                                                           momentum, eps, count_all)
        ctx.save_for_backward(input, weight, mean, invstd, count_all)
        ctx.module = module
        return batch_norm_elemt(input, weight, bias, mean, invstd, eps)

    @staticmethod
    def backward(ctx, grad_output):
        grad_output = grad_output.contiguous()
        input, weight, mean, invstd, count_all = ctx.saved_tensors
        need_input, need_weight, need_bias = ctx.needs_input_grad[0:3]
        sum_dy, sum_dy_xmu, grad_weight, grad_bias = batch_norm_backward_reduce(
            grad_output, input, mean, invstd, weight, need_input, need_weight, need_bias)
        grad_input = None
        if need_input:
            channels = input.size(1)
            sums = ctx.module.sum_over_ranks(torch.cat([sum_dy, sum_dy_xmu]))
            sum_dy, sum_dy_xmu = torch.split(sums, [channels, channels])
            grad_input = batch_norm_backward_elemt(grad_output, input, mean, invstd, weight, sum_dy, sum_dy_xmu,
                                                   count_all)
        return grad_input, grad_weight, grad_bias, None, None, None, None, None
