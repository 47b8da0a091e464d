"""Runs inside every rank: one-host allreduces above the small-message size, whose all-gather copies
the other ranks' slices of the sum out of their tensors (HERRING_READ_PEER_TENSORS,
ops/peer_output_reads.h) or out of the shared result area. Each check compares with references
from every rank's inputs and records a digest of its results, so that the test can compare the
two routes bit for bit across launches; the counters say which route ran.

Results go to $HERRING_TEST_RESULTS/<rank>.json: {"results": {check: "ok" | traceback},
"digests": {check: sha256}, "counters": ...}."""

import hashlib
import os
import sys

import torch

import horovod.torch as hvd
from checks import CHECKS, check, run_and_report
from references import assert_close, bytes_identical_everywhere, counters, make, reduce_reference

DIGESTS = {}
COUNT = 70_001  # elements: above the 64 KiB small-message size for every dtype, odd


def record(name, tensors):
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().contiguous().view(torch.uint8).numpy().tobytes())
    DIGESTS[name] = h.hexdigest()


@check
def every_dtype_and_op_in_place_and_out_of_place():
    cases = [(torch.float32, hvd.Sum), (torch.float32, hvd.Average), (torch.float64, hvd.Sum),
             (torch.float16, hvd.Sum), (torch.bfloat16, hvd.Average), (torch.int32, hvd.Sum),
             (torch.int64, hvd.Max), (torch.float32, hvd.Min), (torch.float32, hvd.Product),
             (torch.uint8, hvd.Min), (torch.int8, hvd.Sum)]
    outs = []
    for i, (dtype, op) in enumerate(cases):
        kind = "product" if op == hvd.Product else "any"
        inputs = [make(r, (COUNT,), dtype, 700 + i, kind) for r in range(N)]
        expected = reduce_reference(inputs, op)
        t = inputs[R].clone()
        hvd.allreduce_(t, op=op, name=f"inplace.{i}")
        assert_close(t, expected, f"in place {dtype} {op}")
        mine = inputs[R].clone()
        out = hvd.allreduce(mine, op=op, name=f"outofplace.{i}")
        assert torch.equal(mine, inputs[R]), f"out of place {dtype} {op}: the input changed"
        assert torch.equal(out, t), f"{dtype} {op}: in place and out of place differ in their bits"
        bytes_identical_everywhere(out, f"peer-reads.{i}")
        outs.append(out)
    record("every_dtype_and_op_in_place_and_out_of_place", outs)


@check
def scaling_factors():
    t = make(R, (COUNT,), torch.float32, 780)
    h = hvd.allreduce_async_(t, op=hvd.Sum, name="scaled", prescale_factor=0.5, postscale_factor=3.0)
    hvd.synchronize(h)
    expected = reduce_reference([make(r, (COUNT,), torch.float32, 780) * 0.5 for r in range(N)], hvd.Sum) * 3.0
    assert_close(t, expected, "prescale 0.5, postscale 3")
    record("scaling_factors", [t])


@check
def fused_tensors_with_empty_ones_and_many_pieces():
    # 3000 tensors of 24 float32 in one buffer (288 KB): a rank's slice spans more than IOV_MAX
    # (1024) tensors, so one read takes several process_vm_readv calls; empty tensors among them.
    # 5000 tensors cannot all be listed in a notice: that buffer goes through the result area.
    outs = []
    for count in (3000, 5000):
        shapes = [(0,) if i % 97 == 5 else (24,) for i in range(count)]
        inputs = [[make(r, s, torch.float32, 800 + i) for i, s in enumerate(shapes)] for r in range(N)]
        got = hvd.grouped_allreduce([t.clone() for t in inputs[R]], op=hvd.Sum, name=f"many.{count}")
        for i, g in enumerate(got):
            assert_close(g, reduce_reference([inputs[r][i] for r in range(N)], hvd.Sum), f"tensor {i} of {count}")
        outs += got
    record("fused_tensors_with_empty_ones_and_many_pieces", outs)


@check
def large_buffer_repeated():
    # Many chunks of the 2 MiB slot, three steps with new values each time.
    n = 5 * 1024 * 1024 + 3
    outs = []
    for step in range(3):
        t = make(R, (n,), torch.float32, 900 + step)
        hvd.allreduce_(t, op=hvd.Sum, name="large")
        assert_close(t, reduce_reference([make(r, (n,), torch.float32, 900 + step) for r in range(N)], hvd.Sum),
                     f"large step {step}")
        outs.append(t)
    record("large_buffer_repeated", outs)


def main():
    global N, R
    hvd.init()
    N, R = hvd.size(), hvd.rank()
    local_size, cpus = hvd.local_size(), len(os.sched_getaffinity(0))
    sys.exit(run_and_report(R, CHECKS, report=lambda: {"counters": counters(), "digests": DIGESTS,
                                                       "local_size": local_size, "cpus": cpus},
                            shutdown=hvd.shutdown))


if __name__ == "__main__":
    main()
