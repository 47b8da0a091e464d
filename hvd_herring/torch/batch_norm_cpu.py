"""The five batch-norm primitives that synchronized batch norm is built from (torch.batch_norm_stats,
batch_norm_gather_stats_with_counts, batch_norm_elemt, batch_norm_backward_reduce,
batch_norm_backward_elemt), for CPU tensors: torch has them for GPUs only, so SyncBatchNorm,
Horovod's and torch's alike, cannot train on a CPU. Same arguments and results as torch's, written
with ordinary tensor operations; statistics are accumulated in float32 at least (float64 stays
float64), as torch's kernels do for half precision.

Channels are dimension 1 of an (N, C, ...) input; "per channel" reduces every other dimension."""

import torch


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
