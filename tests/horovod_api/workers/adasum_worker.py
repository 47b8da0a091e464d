"""Runs inside every rank (mpirun or horovodrun): op=hvd.Adasum on the herring engine, through
Horovod's torch API, against a float64 reference of the Adasum formula combined pairwise up the
binary tree of ranks (Maleki et al.; what Horovod computes), per tensor.

Every rank builds every rank's inputs from seeds, so each computes the reference itself. Results
go to $HERRING_TEST_RESULTS/<rank>.json, one entry per check, plus digests of the results so the
test can check that every rank got the same bits."""

import hashlib

import numpy as np
import torch

import hvd_herring.torch as hvd
from checks import CHECKS, check, run_and_report

DIGESTS = {}


def adasum_pair(a, b):
    dot, a_sq, b_sq = float(np.dot(a, b)), float(np.dot(a, a)), float(np.dot(b, b))
    a_coeff = 1.0 - dot / a_sq * 0.5 if a_sq != 0 else 1.0
    b_coeff = 1.0 - dot / b_sq * 0.5 if b_sq != 0 else 1.0
    return a_coeff * a + b_coeff * b


def adasum_reference(vectors):
    """Ranks 2i and 2i+1 first, then those pairs, and so on (float64)."""
    level = [np.asarray(v, dtype=np.float64).ravel() for v in vectors]
    while len(level) > 1:
        level = [adasum_pair(level[i], level[i + 1]) for i in range(0, len(level), 2)]
    return level[0]


def inputs(seed, shape, size):
    return [np.random.default_rng(seed * 100 + r).normal(0, 1, shape) for r in range(size)]


def assert_close(got, want, dtype, what):
    tol = {torch.float16: 3e-3, torch.float32: 2e-6, torch.float64: 1e-12}[dtype]
    got = got.double().numpy().ravel()
    scale = max(1.0, float(np.abs(want).max()))
    err = float(np.abs(got - want).max()) / scale
    assert err <= tol, f"{what}: relative error {err:.3g} > {tol:g}\ngot {got[:4]}\nwant {want[:4]}"


def digest(name, tensor):
    DIGESTS[name] = hashlib.sha256(tensor.contiguous().numpy().tobytes()).hexdigest()


@check
def every_float_dtype_and_odd_sizes_against_the_formula():
    size, rank = hvd.size(), hvd.rank()
    # Sizes below, at and above the rank count, odd ones (halves of unequal length), and 2^19.
    for i, n in enumerate([1, size - 1 or 1, size + 3, 17 * size - 5, 1000, 1 << 19]):
        vectors = inputs(i, (n,), size)
        want = adasum_reference(vectors)
        for dtype in (torch.float16, torch.float32, torch.float64):
            x = torch.from_numpy(vectors[rank]).to(dtype)
            if dtype == torch.float16:  # the reference starts from the same rounded inputs
                want = adasum_reference([v.astype(np.float16) for v in vectors])
            got = hvd.allreduce(x, op=hvd.Adasum, name=f"adasum.{i}.{dtype}")
            assert got.dtype == dtype and got.shape == x.shape
            assert_close(got, want, dtype, f"n={n} {dtype}")
            digest(f"single.{i}.{dtype}", got)
            want = adasum_reference(vectors)


@check
def orthogonal_vectors_sum_and_parallel_vectors_average():
    size, rank = hvd.size(), hvd.rank()
    q, _ = np.linalg.qr(np.random.default_rng(3).normal(0, 1, (64, size)))
    got = hvd.allreduce(torch.from_numpy(q[:, rank].copy()), op=hvd.Adasum, name="adasum.orthogonal")
    assert np.allclose(got.numpy(), q.sum(axis=1), atol=1e-12), "orthogonal gradients must add up"
    direction = np.random.default_rng(4).normal(0, 1, 64)
    scales = [1.0 + r for r in range(size)]
    got = hvd.allreduce(torch.from_numpy(direction * scales[rank]), op=hvd.Adasum, name="adasum.parallel")
    assert np.allclose(got.numpy(), direction * np.mean(scales), atol=1e-12), "parallel gradients must average"


@check
def fused_tensors_are_combined_each_on_its_own():
    # A grouped allreduce is one fusion buffer; Adasum's coefficients are per tensor (per layer).
    size, rank = hvd.size(), hvd.rank()
    shapes = [(3, 5), (7,), (1,), (128, 3), (2, 2, 2)]
    per_tensor = [inputs(10 + i, shape, size) for i, shape in enumerate(shapes)]
    tensors = [torch.from_numpy(v[rank]).float() for v in per_tensor]
    got = hvd.grouped_allreduce(tensors, op=hvd.Adasum, name="adasum.grouped")
    for i, (g, v) in enumerate(zip(got, per_tensor)):
        assert g.shape == tensors[i].shape
        assert_close(g, adasum_reference(v), torch.float32, f"grouped tensor {i}")
        digest(f"grouped.{i}", g)
    # Asynchronous ones issued together are fused by the engine: the same per-tensor answers.
    handles = [hvd.allreduce_async(t, op=hvd.Adasum, name=f"adasum.async.{i}") for i, t in enumerate(tensors)]
    for i, (h, v) in enumerate(zip(handles, per_tensor)):
        assert_close(hvd.synchronize(h), adasum_reference(v), torch.float32, f"async tensor {i}")


@check
def prescale_and_postscale_apply_around_the_combination():
    size, rank = hvd.size(), hvd.rank()
    vectors = inputs(20, (33,), size)
    got = hvd.allreduce(torch.from_numpy(vectors[rank]), op=hvd.Adasum, prescale_factor=2.0, postscale_factor=0.25,
                        name="adasum.scaled")
    want = adasum_reference([2.0 * v for v in vectors]) * 0.25
    assert_close(got, want, torch.float64, "prescale 2, postscale 0.25")


@check
def bad_requests_raise_naming_what_is_wrong():
    try:
        hvd.allreduce(torch.ones(4, dtype=torch.int32), op=hvd.Adasum, name="adasum.int")
    except Exception as e:  # noqa: BLE001
        assert "float16, float32 and float64" in str(e) and "adasum.int" in str(e), str(e)
    else:
        raise AssertionError("an int32 Adasum allreduce did not raise")
    if hvd.size() > 2:
        subset = hvd.add_process_set([0, 1])
        try:
            hvd.allreduce(torch.ones(4), op=hvd.Adasum, process_set=subset)
        except NotImplementedError as e:
            assert "non-global process sets" in str(e), str(e)
        else:
            raise AssertionError("Adasum over a process set did not raise")
        hvd.remove_process_set(subset)
    out = hvd.allreduce(torch.ones(2), op=hvd.Sum, name="adasum.after.errors")  # the engine goes on
    assert torch.equal(out, torch.full((2,), float(hvd.size())))


@check
def distributed_optimizer_with_adasum_matches_a_replay():
    # Horovod's own _DistributedAdasumOptimizer (horovod/torch/optimizer.py, unchanged): each rank
    # takes a local step, the deltas are combined with Adasum, and every rank applies the result.
    size, rank = hvd.size(), hvd.rank()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1)).double()
    start = [p.detach().clone() for p in model.parameters()]
    batches = [[(torch.from_numpy(np.random.default_rng(1000 * s + r).normal(0, 1, (8, 5))),
                 torch.from_numpy(np.random.default_rng(2000 * s + r).normal(0, 1, (8, 1)))) for r in range(size)]
               for s in range(4)]
    lr = 0.1
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=lr),
                                   named_parameters=model.named_parameters(), op=hvd.Adasum)
    for step in batches:
        x, y = step[rank]
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    # The replay, in one process: per step and parameter, Adasum of the ranks' SGD deltas.
    replay = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1)).double()
    with torch.no_grad():
        for p, s in zip(replay.parameters(), start):
            p.copy_(s)
    for step in batches:
        deltas = []
        for x, y in step:
            replay.zero_grad()
            torch.nn.functional.mse_loss(replay(x), y).backward()
            deltas.append([(-lr * p.grad).numpy().copy() for p in replay.parameters()])
        with torch.no_grad():
            for i, p in enumerate(replay.parameters()):
                combined = adasum_reference([d[i] for d in deltas]).reshape(p.shape)
                p.add_(torch.from_numpy(combined))
    for i, (p, q) in enumerate(zip(model.parameters(), replay.parameters())):
        err = (p.detach() - q.detach()).abs().max().item()
        assert err < 1e-10, f"parameter {i} differs from the replay by {err}"
    assert any(not torch.equal(p.detach(), s) for p, s in zip(model.parameters(), start)), "nothing trained"


def non_power_of_two_sizes_are_refused_as_horovod_refuses_them():
    for call in (lambda: hvd.allreduce(torch.ones(4), op=hvd.Adasum),
                 lambda: hvd.allreduce_(torch.ones(4), op=hvd.Adasum),
                 lambda: hvd.grouped_allreduce([torch.ones(4)], op=hvd.Adasum)):
        try:
            call()
        except NotImplementedError as e:
            assert "non-power of 2 ranks" in str(e), str(e)
        else:
            raise AssertionError(f"Adasum over {hvd.size()} ranks did not raise")
    out = hvd.allreduce(torch.ones(2), op=hvd.Sum, name="adasum.refused.then.sum")
    assert torch.equal(out, torch.full((2,), float(hvd.size())))


def main():
    hvd.init()
    size = hvd.size()
    from hvd_herring.basics import basics
    checks = CHECKS if size & (size - 1) == 0 else [non_power_of_two_sizes_are_refused_as_horovod_refuses_them]
    # Exits 0 with failed checks too: the test reads them.
    run_and_report(hvd.rank(), checks, report=lambda: {"digests": DIGESTS, "counters": basics.counters(), "size": size},
                   shutdown=hvd.shutdown)


if __name__ == "__main__":
    main()
