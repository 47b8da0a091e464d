"""Runs inside every rank: one process drives the engine from PyTorch and from TensorFlow,
interleaving their allreduces (one after the other, and a torch allreduce in flight while a TF one
runs), and checks that both give correct results on one engine: hvd.init() from both fronts
starts a single engine, the TF ops' work shows in the counters the Python front reads, and
shutting down from one front stops the other's.

Writes $HERRING_TEST_RESULTS/<rank>.json."""

import sys

import numpy as np
import tensorflow as tf
import torch

import horovod.tensorflow as hvd_tf
import horovod.torch as hvd_torch
import hvd_herring
from hvd_herring.basics import basics
from checks import check, progress, run_and_report, selected

N = R = None


@check
def both_fronts_share_one_engine():
    engine = basics.engine()
    hvd_tf.init()  # already running: must not start a second engine
    assert basics.engine() is engine, "hvd.init() from TensorFlow replaced the engine started from PyTorch"
    assert (hvd_tf.rank(), hvd_tf.size()) == (hvd_torch.rank(), hvd_torch.size()) == (R, N)
    assert int(hvd_tf.rank_op()) == R and int(hvd_tf.size_op()) == N  # what the TF kernels see


@check
def interleaved_torch_and_tf_allreduces_are_correct():
    before = hvd_herring.counters()
    expected = lambda k: float(sum(r * 10 + k for r in range(N)))  # noqa: E731
    traced = tf.function(lambda x: hvd_tf.allreduce(x, op=hvd_tf.Sum, name="tf.traced"))
    for k in range(5):
        t = hvd_torch.allreduce(torch.full((3,), float(R * 10 + k)), op=hvd_torch.Sum, name=f"torch.{k}")
        x = hvd_tf.allreduce(tf.fill([3], float(R * 10 + k)), op=hvd_tf.Sum, name=f"tf.{k}")
        y = traced(tf.fill([2], float(R * 10 + k)))
        # A torch collective in flight while a TF one is submitted and completes.
        handle = hvd_torch.allreduce_async(torch.full((4,), float(R * 10 + k)), op=hvd_torch.Sum,
                                           name=f"torch.async.{k}")
        z = hvd_tf.allreduce(tf.fill([5], float(R * 10 + k)), op=hvd_tf.Sum, name=f"tf.during.{k}")
        w = hvd_torch.synchronize(handle)
        for what, value, size in (("torch", t.numpy(), 3), ("tf", x.numpy(), 3), ("tf traced", y.numpy(), 2),
                                  ("torch async", w.numpy(), 4), ("tf during torch", z.numpy(), 5)):
            assert np.array_equal(value, np.full(size, expected(k))), f"step {k} {what}: {value} != {expected(k)}"
    after = hvd_herring.counters()
    # 25 collectives went through the engine whose counters the Python front reads.
    assert after["responses"] - before["responses"] >= 25, (before, after)


@check
def gradients_flow_from_both_frameworks():
    xt = torch.full((2,), float(R + 1), requires_grad=True)
    hvd_torch.allreduce(xt, op=hvd_torch.Sum, name="torch.grad").sum().backward()
    x = tf.constant([float(R + 1)] * 2)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.reduce_sum(hvd_tf.allreduce(x, op=hvd_tf.Sum, name="tf.grad") * float(R + 1))
    g = tape.gradient(y, x)
    assert np.array_equal(xt.grad.numpy(), np.full(2, float(N))), xt.grad
    assert np.array_equal(g.numpy(), np.full(2, float(sum(r + 1 for r in range(N))))), g


def main():
    global N, R
    hvd_torch.init()
    N, R = hvd_torch.size(), hvd_torch.rank()
    status = run_and_report(R, selected(), report=lambda: {"counters": hvd_herring.counters(), "size": N},
                            after_each=progress(R))
    hvd_tf.shutdown()
    # One engine: shutting down through TensorFlow's front stopped PyTorch's too.
    assert not hvd_torch.is_initialized()
    try:
        hvd_tf.allreduce(tf.ones(1), name="after.shutdown")
    except tf.errors.FailedPreconditionError as e:
        assert "not been initialized" in str(e), e
    else:
        raise AssertionError("a TF collective after shutdown must fail")
    print(f"rank {R}: one engine, shut down from TensorFlow", file=sys.stderr, flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
