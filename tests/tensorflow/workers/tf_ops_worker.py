"""Runs inside every rank (horovodrun, HOROVOD_BACKEND=herring): every collective of
`import horovod.tensorflow as hvd`, eagerly and inside tf.function, checked against references
computed with numpy from every rank's inputs (any rank can compute any rank's input); gradients
checked against what Horovod's definitions give for rank-dependent upstream gradients; errors.

Each check's name ends in .eager or .function (the same body, run eagerly or traced)."""

import os
import sys

import numpy as np
import tensorflow as tf

import api_checks
import horovod.tensorflow as hvd
import hvd_herring
from api_checks import expect_error
from checks import check, in_modes, progress, run_and_report, selected

ALL_DTYPES = [tf.uint8, tf.int8, tf.int16, tf.int32, tf.int64, tf.float16, tf.bfloat16, tf.float32, tf.float64]
N = None
R = None
STATIC_SET = None


# Registers a body twice, <body>.eager and <body>.function: run eagerly, and traced into one
# tf.function (whose collectives are named after their graph nodes and all in flight together).
both_modes = in_modes(eager=lambda fn: fn(), function=lambda fn: tf.function(fn)())


def make(rank, shape, dtype, seed, kind="any"):
    """This check's input on `rank`, as a numpy array of dtype's numpy type."""
    g = np.random.default_rng(seed * 1000 + rank)
    np_type = dtype.as_numpy_dtype
    if dtype == tf.bool:
        return g.integers(0, 2, shape).astype(bool)
    if kind == "product":
        if dtype.is_floating:
            return (0.9 + 0.2 * g.random(shape)).astype(np_type)
        return g.integers(1, 3, shape).astype(np_type)
    if dtype.is_floating:
        return g.standard_normal(shape).astype(np_type)
    low = 0 if dtype == tf.uint8 else -20
    return g.integers(low, 20, shape).astype(np_type)


def reduce_reference(inputs, op, dtype):
    """What an allreduce of `inputs` (one per rank) gives, computed wide."""
    wide = [x.astype(np.float64) if dtype.is_floating else x.astype(np.int64) for x in inputs]
    acc = wide[0].copy()
    for x in wide[1:]:
        if op in (hvd.Sum, hvd.Average):
            acc = acc + x
        elif op == hvd.Min:
            acc = np.minimum(acc, x)
        elif op == hvd.Max:
            acc = np.maximum(acc, x)
        elif op == hvd.Product:
            acc = acc * x
    if op == hvd.Average:
        acc = acc / len(inputs) if dtype.is_floating else np.trunc(acc * (1.0 / len(inputs))).astype(np.int64)
    return acc.astype(dtype.as_numpy_dtype)  # integers wrap like the engine's fixed-width arithmetic


def assert_close(actual, expected, what, dtype=None):
    actual_np = actual.numpy() if hasattr(actual, "numpy") else np.asarray(actual)
    expected = np.asarray(expected)
    dtype = dtype or tf.as_dtype(actual.dtype)
    assert actual_np.shape == expected.shape, f"{what}: shape {actual_np.shape} != {expected.shape}"
    if dtype in (tf.float16, tf.bfloat16):
        ok = np.allclose(actual_np.astype(np.float64), expected.astype(np.float64), rtol=1e-2, atol=1e-2)
    elif dtype == tf.float32:
        ok = np.allclose(actual_np, expected, rtol=1e-5, atol=1e-6)
    elif dtype.is_floating:
        ok = np.allclose(actual_np, expected, rtol=1e-12, atol=1e-12)
    else:
        ok = np.array_equal(actual_np, expected)
    if not ok:
        diff = np.abs(actual_np.astype(np.float64) - expected.astype(np.float64)).max()
        raise AssertionError(f"{what}: max abs difference {diff}\nactual {actual_np.ravel()[:8]}\n"
                             f"expected {expected.ravel()[:8]}")


def rows_of(n, members):
    """reducescatter's split: the first n % members members get one more row."""
    share = [n // members + (1 if m < n % members else 0) for m in range(members)]
    return share, sum(share[:R])


# --- allreduce -----------------------------------------------------------------------------------

@both_modes
def allreduce_every_dtype_and_op(run):
    cases = []
    seed = 1
    for dtype in ALL_DTYPES:
        for op in (hvd.Sum, hvd.Average, hvd.Min, hvd.Max, hvd.Product):
            seed += 1
            kind = "product" if op == hvd.Product else "any"
            cases.append((dtype, op, seed, kind))

    def body():
        return [hvd.allreduce(tf.constant(make(R, (17, 5), d, s, k), dtype=d), op=op) for d, op, s, k in cases]

    outs = run(body)
    for (dtype, op, seed, kind), out in zip(cases, outs):
        expected = reduce_reference([make(r, (17, 5), dtype, seed, kind) for r in range(N)], op, dtype)
        assert_close(out, expected, f"allreduce {dtype.name} op={op}", dtype)


@both_modes
def allreduce_scaling_bool_and_empty(run):
    x = make(R, (1000,), tf.float32, 80)
    b = make(R, (33,), tf.bool, 70)

    def body():
        scaled = hvd.allreduce(tf.constant(x), op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0)
        averaged = hvd.allreduce(tf.constant(x), op=hvd.Average, prescale_factor=2.0)
        lo = hvd.allreduce(tf.constant(b), op=hvd.Min)
        hi = hvd.allreduce(tf.constant(b), op=hvd.Max)
        empty = hvd.allreduce(tf.zeros((0, 3)))
        scalar = hvd.allreduce(tf.constant(float(R)), op=hvd.Sum)
        return scaled, averaged, lo, hi, empty, scalar

    scaled, averaged, lo, hi, empty, scalar = run(body)
    everyone = [make(r, (1000,), tf.float32, 80) for r in range(N)]
    assert_close(scaled, np.sum(everyone, axis=0) * 0.5 * 3.0, "pre/postscale Sum")
    assert_close(averaged, np.mean(everyone, axis=0) * 2.0, "prescale Average")
    bools = np.stack([make(r, (33,), tf.bool, 70) for r in range(N)])
    assert np.array_equal(lo.numpy(), bools.all(axis=0)) and np.array_equal(hi.numpy(), bools.any(axis=0))
    assert empty.shape == (0, 3), empty.shape
    assert scalar.numpy() == sum(range(N)), scalar


@both_modes
def grouped_allreduce_and_many_small(run):
    shapes = [(3,), (4, 5), (1,), (2, 2, 2)]
    mixed = [tf.float32, tf.float64, tf.float32, tf.float64]

    def body():
        same = hvd.grouped_allreduce([tf.constant(make(R, s, tf.float32, 300 + i)) for i, s in enumerate(shapes)],
                                     op=hvd.Average)
        mixed_out = hvd.grouped_allreduce([tf.constant(make(R, s, d, 310 + i)) for i, (s, d)
                                           in enumerate(zip(shapes, mixed))], op=hvd.Sum)
        many = [hvd.allreduce(tf.constant(make(R, (i + 1,), tf.float32, 400 + i)), op=hvd.Sum) for i in range(48)]
        return same, mixed_out, many

    same, mixed_out, many = run(body)
    for i, (s, o) in enumerate(zip(shapes, same)):
        assert_close(o, reduce_reference([make(r, s, tf.float32, 300 + i) for r in range(N)], hvd.Average,
                                          tf.float32), f"grouped_allreduce {i}")
    for i, (s, d, o) in enumerate(zip(shapes, mixed, mixed_out)):
        assert o.dtype == d, (o.dtype, d)
        assert_close(o, reduce_reference([make(r, s, d, 310 + i) for r in range(N)], hvd.Sum, d),
                     f"grouped_allreduce mixed dtypes {i}")
    for i, o in enumerate(many):
        assert_close(o, reduce_reference([make(r, (i + 1,), tf.float32, 400 + i) for r in range(N)], hvd.Sum,
                                         tf.float32), f"small tensor {i}")


@check
def independent_allreduces_in_a_function_are_fused():
    @tf.function
    def step():
        return [hvd.allreduce(tf.constant(make(R, (i + 1,), tf.float32, 500 + i)), op=hvd.Sum) for i in range(64)]

    # TF's executor starts the 64 ops from its thread pool; one that finds the engine idle starts a
    # cycle of its own (the latency path), so on a busy 2-core machine a single call can go unfused.
    # Every rank makes the same three calls and the best counts.
    fewest = None
    for _ in range(3):
        before = hvd_herring.counters()["fused_buffers"]
        outs = step()
        buffers = hvd_herring.counters()["fused_buffers"] - before
        fewest = buffers if fewest is None else min(fewest, buffers)
        for i, o in enumerate(outs):
            assert_close(o, reduce_reference([make(r, (i + 1,), tf.float32, 500 + i) for r in range(N)], hvd.Sum,
                                             tf.float32), f"tensor {i}")
    assert fewest < 64, f"64 independent allreduces of one tf.function took {fewest} fused buffers (fewest of 3 calls)"


@both_modes
def allreduce_indexed_slices_and_fp16_compression(run):
    var = tf.Variable(make(0, (10, 4), tf.float32, 600))
    ids = [[R, (R + 3) % 10, 7][: 2 + R % 2]]

    def body():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.gather(var, ids[0]) * float(R + 1))
        sparse = tape.gradient(loss, var)
        assert isinstance(sparse, tf.IndexedSlices), type(sparse)
        reduced = hvd.allreduce(sparse, op=hvd.Average)
        dense = tf.convert_to_tensor(reduced)
        fp16 = hvd.allreduce(tf.constant(make(R, (64,), tf.float32, 601)), compression=hvd.Compression.fp16)
        return dense, fp16

    dense, fp16 = run(body)
    expected = np.zeros((10, 4))
    for r in range(N):
        for i in [r, (r + 3) % 10, 7][: 2 + r % 2]:
            expected[i] += (r + 1) / N
    assert_close(dense, expected.astype(np.float32), "IndexedSlices allreduce")
    assert fp16.dtype == tf.float32
    expected = np.mean([make(r, (64,), tf.float32, 601) for r in range(N)], axis=0)
    assert np.allclose(fp16.numpy(), expected, rtol=1e-2, atol=1e-2), "fp16-compressed allreduce"


# --- allgather -----------------------------------------------------------------------------------

@both_modes
def allgather_first_dimension_differs_per_rank(run):
    dtypes = ALL_DTYPES + [tf.bool]

    def body():
        outs = [hvd.allgather(tf.constant(make(R, (R + 1, 3), d, 700), dtype=d)) for d in dtypes]
        grouped = hvd.grouped_allgather([tf.constant(make(R, (R, 2), tf.float32, 710)),
                                         tf.constant(make(R, (2,), tf.float32, 711))])
        return outs, grouped

    outs, grouped = run(body)
    for d, out in zip(dtypes, outs):
        expected = np.concatenate([make(r, (r + 1, 3), d, 700) for r in range(N)])
        assert_close(out, expected, f"allgather {d.name}", d)
    assert_close(grouped[0], np.concatenate([make(r, (r, 2), tf.float32, 710) for r in range(N)]),
                 "grouped_allgather (rank 0 contributes no rows)")
    assert_close(grouped[1], np.concatenate([make(r, (2,), tf.float32, 711) for r in range(N)]), "grouped_allgather")


@check
def allgather_results_bitwise_identical_and_aligned():
    out = hvd.allreduce(tf.constant(make(R, (4099,), tf.float32, 720)), op=hvd.Sum)
    raw = tf.reshape(tf.bitcast(out, tf.uint8), [1, -1])
    everyone = hvd.allgather(raw).numpy()
    for r in range(N):
        assert np.array_equal(everyone[r], everyone[0]), f"rank {r} differs from rank 0 bitwise"
    # Outputs the engine allocates are handed to TensorFlow without a copy: they must be aligned
    # (a misaligned buffer is accepted and the next op aborts). Use them in a few ops.
    gathered = hvd.allgather(tf.constant(make(R, (R + 2, 7), tf.float64, 721)))
    total = tf.reduce_sum(tf.matmul(gathered, gathered, transpose_a=True))
    expected = np.concatenate([make(r, (r + 2, 7), tf.float64, 721) for r in range(N)])
    assert np.isclose(total.numpy(), (expected.T @ expected).sum())


# --- broadcast -----------------------------------------------------------------------------------

@both_modes
def broadcast_from_every_root_and_dtype(run):
    dtypes = ALL_DTYPES + [tf.bool]

    def body():
        return [[hvd.broadcast(tf.constant(make(R, (7, 2), d, 800 + root), dtype=d), root_rank=root)
                 for d in dtypes] for root in range(N)]

    outs = run(body)
    for root in range(N):
        for d, out in zip(dtypes, outs[root]):
            assert_close(out, make(root, (7, 2), d, 800 + root), f"broadcast root {root} {d.name}", d)


@both_modes
def broadcast_variables_tf_and_keras(run):
    import keras
    tf_var = tf.Variable(make(R, (5,), tf.float32, 810))
    keras_var = keras.Variable(make(R, (2, 3), tf.float64, 811))

    def body():
        hvd.broadcast_variables([tf_var, keras_var], root_rank=N - 1)

    run(body)
    assert_close(tf_var, make(N - 1, (5,), tf.float32, 810), "tf.Variable broadcast")
    assert_close(tf.convert_to_tensor(keras_var), make(N - 1, (2, 3), tf.float64, 811), "keras.Variable broadcast")


@check
def broadcast_object_and_allgather_object():
    api_checks.broadcast_object_and_allgather_object(hvd, R, N)


# --- alltoall ------------------------------------------------------------------------------------

@both_modes
def alltoall_with_and_without_splits(run):
    splits = api_checks.alltoall_splits(R, N)

    def body():
        out, received = hvd.alltoall(tf.constant(make(R, (sum(splits), 2), tf.float32, 900)),
                                     splits=tf.constant(splits, tf.int32))
        even = hvd.alltoall(tf.constant(make(R, (2 * N, 3), tf.int32, 910)))
        return out, received, even

    out, received, even = run(body)
    expected, expected_splits = api_checks.alltoall_received(R, N, lambda r, n: make(r, (n, 2), tf.float32, 900))
    assert_close(out, np.concatenate(expected), "alltoall with splits")
    assert received.numpy().tolist() == expected_splits, received
    assert_close(even, np.concatenate([make(r, (2 * N, 3), tf.int32, 910)[2 * R:2 * R + 2] for r in range(N)]),
                 "alltoall even split")


# --- reducescatter -------------------------------------------------------------------------------

@both_modes
def reducescatter_uneven_rows_and_grouped(run):
    rows = 2 * N + 1
    cases = [(op, d) for op in (hvd.Sum, hvd.Average) for d in (tf.float32, tf.int32, tf.bfloat16)]
    group_rows = [N * 2, N + 1]

    def body():
        singles = [hvd.reducescatter(tf.constant(make(R, (rows, 3), d, 1000), dtype=d), op=op) for op, d in cases]
        grouped = hvd.grouped_reducescatter([tf.constant(make(R, (n, 2), tf.float64, 1010 + i))
                                             for i, n in enumerate(group_rows)], op=hvd.Sum)
        return singles, grouped

    singles, grouped = run(body)
    share, start = rows_of(rows, N)
    for (op, d), out in zip(cases, singles):
        full = reduce_reference([make(r, (rows, 3), d, 1000) for r in range(N)], op, d)
        assert_close(out, full[start:start + share[R]], f"reducescatter {d.name} op={op}", d)
    for i, (n, out) in enumerate(zip(group_rows, grouped)):
        share, start = rows_of(n, N)
        full = reduce_reference([make(r, (n, 2), tf.float64, 1010 + i) for r in range(N)], hvd.Sum, tf.float64)
        assert_close(out, full[start:start + share[R]], f"grouped_reducescatter {i}")


# --- gradients -----------------------------------------------------------------------------------

def weights(rank, shape, seed):
    """Rank-dependent upstream gradients: loss_r = sum(weights(r) * y)."""
    return make(rank, shape, tf.float64, seed)


@both_modes
def gradients_of_the_collectives(run):
    x_ar = make(R, (4,), tf.float64, 1100)
    x_ag = make(R, (R + 1, 2), tf.float64, 1101)
    x_bc = make(R, (3,), tf.float64, 1102)
    splits = [(R + j) % 2 + 1 for j in range(N)]
    x_a2a = make(R, (sum(splits), 2), tf.float64, 1103)
    rows = 2 * N + 1
    x_rs = make(R, (rows, 2), tf.float64, 1104)
    x_grp = [make(R, (3,), tf.float64, 1105), make(R, (2, 2), tf.float64, 1106)]

    def body():
        xs = [tf.constant(v) for v in (x_ar, x_ar, x_ag, x_bc, x_a2a, x_rs, x_grp[0], x_grp[1])]
        with tf.GradientTape(persistent=True) as tape:
            for x in xs:
                tape.watch(x)
            ar_sum = hvd.allreduce(xs[0], op=hvd.Sum)
            ar_avg = hvd.allreduce(xs[1], op=hvd.Average, prescale_factor=2.0, postscale_factor=0.5)
            ag = hvd.allgather(xs[2])
            bc = hvd.broadcast(xs[3], root_rank=1 % N)
            a2a, _ = hvd.alltoall(xs[4], splits=splits)
            rs = hvd.reducescatter(xs[5], op=hvd.Sum)
            grp = hvd.grouped_allreduce([xs[6], xs[7]], op=hvd.Sum)
            ag_rows = tf.shape(ag)[0]
            losses = [
                tf.reduce_sum(weights(R, (4,), 1200) * ar_sum),
                tf.reduce_sum(weights(R, (4,), 1201) * ar_avg),
                tf.reduce_sum(tf.constant(weights(R, (N * (N + 1) // 2, 2), 1202))[:ag_rows] * ag),
                tf.reduce_sum(weights(R, (3,), 1203) * bc),
                tf.reduce_sum(tf.reshape(tf.constant(weights(R, (64,), 1204)), [32, 2])[:tf.shape(a2a)[0]] * a2a),
                tf.reduce_sum(tf.constant(weights(R, (rows, 2), 1205))[:tf.shape(rs)[0]] * rs),
                tf.reduce_sum(weights(R, (3,), 1206) * grp[0]) + tf.reduce_sum(weights(R, (2, 2), 1207) * grp[1]),
            ]
        grads = [tape.gradient(losses[0], xs[0]), tape.gradient(losses[1], xs[1]), tape.gradient(losses[2], xs[2]),
                 tape.gradient(losses[3], xs[3]), tape.gradient(losses[4], xs[4]), tape.gradient(losses[5], xs[5]),
                 *tape.gradient(losses[6], [xs[6], xs[7]])]
        return grads

    g = run(body)
    w = lambda shape, seed: [weights(r, shape, seed) for r in range(N)]  # noqa: E731
    # allreduce: the gradient is allreduced with the same op and scale factors.
    assert_close(g[0], np.sum(w((4,), 1200), axis=0), "grad allreduce Sum")
    assert_close(g[1], np.mean(w((4,), 1201), axis=0) * 2.0 * 0.5, "grad allreduce Average scaled")
    # allgather: the upstream gradient averaged over ranks, this rank's rows.
    start = sum(r + 1 for r in range(R))
    assert_close(g[2], np.mean(w((N * (N + 1) // 2, 2), 1202), axis=0)[start:start + R + 1], "grad allgather")
    # broadcast: averaged on the root, zero elsewhere.
    expected = np.mean(w((3,), 1203), axis=0) * (1.0 if R == 1 % N else 0.0)
    assert_close(g[3], expected, "grad broadcast")
    # alltoall: rows sent to rank j come back with rank j's upstream gradient of those rows.
    expected = []
    for j in range(N):
        recv_j = [(r + j) % 2 + 1 for r in range(N)]  # what rank j received from each rank
        upstream_j = weights(j, (64,), 1204).reshape(32, 2)
        offset = sum(recv_j[:R])
        expected.append(upstream_j[offset:offset + splits[j]])
    assert_close(g[4], np.concatenate(expected), "grad alltoall")
    # reducescatter (Sum): allgather of the upstream gradients, times the set's size.
    upstream = []
    for j in range(N):
        share, _ = rows_of(rows, N)
        upstream.append(weights(j, (rows, 2), 1205)[:share[j]])
    assert_close(g[5], np.concatenate(upstream) * N, "grad reducescatter Sum")
    assert_close(g[6], np.sum(w((3,), 1206), axis=0), "grad grouped_allreduce 0")
    assert_close(g[7], np.sum(w((2, 2), 1207), axis=0), "grad grouped_allreduce 1")


# --- synchronization, topology, process sets ----------------------------------------------------

@check
def join_and_barrier():
    hvd.barrier()
    results = [hvd.allreduce(tf.ones(3), op=hvd.Sum, name=f"join.step{i}") for i in range(R + 1)]
    last = int(hvd.join())
    assert last == N - 1, f"the last rank to join is {N - 1}, got {last}"
    for i, res in enumerate(results):
        # Step i is submitted by ranks i..N-1; the others have joined and contribute zeros.
        assert np.array_equal(res.numpy(), np.full(3, float(N - i))), (i, res)
    hvd.barrier()


@both_modes
def topology_ops(run):
    def body():
        return (hvd.rank_op(), hvd.size_op(), hvd.local_rank_op(), hvd.local_size_op(),
                hvd.process_set_included_op(STATIC_SET.process_set_id), hvd.size_op(STATIC_SET.process_set_id))

    rank, size, local_rank, local_size, included, set_size = [int(v) for v in run(body)]
    assert (rank, size, local_rank, local_size) == (hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size())
    assert included == (1 if R in STATIC_SET.ranks else 0), included
    assert set_size == 2, set_size


@check
def process_sets_static_and_dynamic():
    members = STATIC_SET.ranks
    if R in members:
        # Named: eager collectives are otherwise numbered per process, and ranks outside the set
        # do not count this one.
        out = hvd.allreduce(tf.constant([float(R)]), op=hvd.Sum, process_set=STATIC_SET, name="ps.static")
        assert out.numpy()[0] == sum(members), out
        gathered = tf.function(lambda: hvd.allgather(tf.constant([R]), process_set=STATIC_SET))()
        assert gathered.numpy().tolist() == members, gathered
    dyn = hvd.add_process_set([1, 2] if N > 2 else [0, 1])
    if R in dyn.ranks:
        out = hvd.allreduce(tf.constant([float(R)]), op=hvd.Sum, process_set=dyn, name="ps.dynamic")
        assert out.numpy()[0] == sum(dyn.ranks), out
    assert hvd.remove_process_set(dyn)
    hvd.barrier()
    if R not in members:
        api_checks.outsider_is_refused(hvd, tf.ones(1), STATIC_SET, "ps.not_member", tf.errors.InvalidArgumentError)


# --- Horovod's Python layer ---------------------------------------------------------------------

@check
def legacy_v1_optimizer_and_sync_batch_norm():
    var = tf.Variable(np.zeros(3))
    opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(1.0))
    target = make(R, (3,), tf.float64, 1300)
    grads_and_vars = opt.compute_gradients(lambda: tf.reduce_sum((var - target) ** 2), var_list=[var])
    grad = grads_and_vars[0][0]
    assert_close(grad, np.mean([-2 * make(r, (3,), tf.float64, 1300) for r in range(N)], axis=0),
                 "legacy DistributedOptimizer gradient")
    layer = hvd.SyncBatchNormalization(axis=-1, epsilon=1e-3, center=False, scale=False)
    x = make(R, (4 + R, 3), tf.float32, 1301)
    y = layer(tf.constant(x), training=True)
    everyone = np.concatenate([make(r, (4 + r, 3), tf.float32, 1301) for r in range(N)])
    expected = (x - everyone.mean(axis=0)) / np.sqrt(everyone.var(axis=0) + 1e-3)
    assert np.allclose(y.numpy(), expected, rtol=1e-4, atol=1e-4), "SyncBatchNormalization uses global statistics"


# --- errors --------------------------------------------------------------------------------------

@check
def mismatches_raise_tf_errors_naming_tensor_and_ranks():
    odd = 1 % N
    expect_error(lambda: hvd.allreduce(tf.ones((4,) if R == odd else (3,)), name="mismatch.shape"),
                 tf.errors.FailedPreconditionError, "'mismatch.shape'", f"rank {odd} has [4]", "[3]")
    expect_error(lambda: tf.function(lambda: hvd.allreduce(tf.ones((2, 2) if R == odd else (4,)),
                                                           name="mismatch_in_function"))(),
                 tf.errors.FailedPreconditionError, "mismatch_in_function", f"rank {odd} has [2, 2]")
    expect_error(lambda: hvd.allreduce(tf.ones(3, dtype=tf.float64 if R == odd else tf.float32),
                                       name="mismatch.dtype"),
                 tf.errors.FailedPreconditionError, "Mismatched data types", f"rank {odd} has float64")
    expect_error(lambda: hvd.broadcast(tf.ones(2), root_rank=N + 5, name="bad.root"),
                 tf.errors.InvalidArgumentError, "out of range")
    expect_error(lambda: hvd.allreduce(tf.ones(2, dtype=tf.bool), op=hvd.Sum), tf.errors.InvalidArgumentError,
                 "not supported")
    out = hvd.allreduce(tf.ones(2), op=hvd.Sum, name="after.mismatch")
    assert np.array_equal(out.numpy(), np.full(2, float(N))), out


def main():
    global N, R, STATIC_SET
    size = int(os.environ["HOROVOD_SIZE"])
    STATIC_SET = hvd.ProcessSet([0, size - 1])
    hvd.init(process_sets=[STATIC_SET])
    N, R = hvd.size(), hvd.rank()
    status = run_and_report(R, selected(), report=lambda: {"counters": hvd_herring.counters(), "size": N},
                            after_each=progress(R))
    hvd.shutdown()
    return status


if __name__ == "__main__":
    sys.exit(main())
