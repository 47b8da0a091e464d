"""torch.distributed on "herring" started as torch's tutorials start it: `mp.spawn` and
init_process_group with an explicit rank and world size (tcp://, file:// or store=), no RANK in the
environment. Inside every rank it checks what a torch user relies on and nobody here wrote a
test for before: Works, futures and tensors dropped at every point of a collective's life (the
memory the engine wrote must still be theirs), c10d's ordering (barrier after async work, wait on
a later Work), DDP + Join with uneven inputs, and a child forked after init.

    python torch_dist_lifecycle_worker.py --init tcp|file|store --np N --results DIR

Results go to DIR/<rank>.json, one entry per check, as the other workers do."""

import argparse
import gc
import os
import tempfile
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import forked_child
from checks import check, run_and_report, selected

TIMEOUT_SECONDS = 30
N = R = 0


def churn_and_verify(n_elements, count=64):
    """Allocates and fills tensors the size of the ones just dropped (the allocator hands their
    memory out again), lets the collectives run, and returns a check that nothing wrote into them."""
    junk = [torch.full((n_elements,), 7.0) for _ in range(count)]

    def verify(what):
        for i, t in enumerate(junk):
            if not torch.all(t == 7.0):
                raise AssertionError(f"{what}: freed memory was written after its tensor was dropped "
                                     f"(junk tensor {i} holds {t[t != 7.0][:4].tolist()})")
    return verify


@check
def rank_and_size_are_the_ones_torch_was_given():
    from hvd_herring.basics import basics
    assert "RANK" not in os.environ and "WORLD_SIZE" not in os.environ, "the launch must not set RANK"
    assert (basics.rank(), basics.size()) == (R, N), (basics.rank(), basics.size(), R, N)
    assert dist.get_backend() == "herring"


@check
def work_and_tensor_dropped_before_the_collective_starts():
    # Rank 0 issues first and drops everything; the others join 0.5 s later.
    n = 1 << 16
    for _ in range(3):
        if R == 0:
            t = torch.ones(n)
            dist.all_reduce(t, async_op=True)  # the Work is dropped at once
            del t
            gc.collect()
            verify = churn_and_verify(n)
        else:
            time.sleep(0.5)
            t = torch.ones(n)
            dist.all_reduce(t)
            assert torch.all(t == N), f"the peers' result {t[:4]}"
        dist.barrier()
        if R == 0:
            verify("dropped before the collective started")


@check
def work_and_tensor_dropped_while_the_collective_runs():
    n = 1 << 22  # 16 MiB of float32: the engine is still streaming it when the caller drops it
    for _ in range(3):
        t = torch.ones(n)
        dist.all_reduce(t, async_op=True)
        del t
        gc.collect()
        verify = churn_and_verify(n, count=8)
        dist.barrier()
        verify("dropped while the collective ran")


@check
def work_dropped_after_the_collective_completed():
    t = torch.ones(1000)
    work = dist.all_reduce(t, async_op=True)
    deadline = time.monotonic() + TIMEOUT_SECONDS
    while not work.is_completed():
        assert time.monotonic() < deadline, "is_completed() never became true"
        time.sleep(0.001)
    del work
    gc.collect()
    assert torch.all(t == N)


@check
def future_dropped_before_completion():
    t = torch.ones(4096)
    work = dist.all_reduce(t, async_op=True)
    future = work.get_future()
    del work, future
    dist.barrier()
    assert torch.all(t == N), "barrier returned before the dropped Work's collective"
    # A future whose Work was dropped still completes with the result.
    t2 = torch.ones(8)
    future = dist.all_reduce(t2, async_op=True).get_future()
    gc.collect()
    result = future.wait()
    assert torch.all(result[0] == N) and torch.all(t2 == N), result


@check
def non_contiguous_tensor_gets_its_result_when_the_work_is_dropped():
    base = torch.arange(24, dtype=torch.float64).reshape(4, 6) + R
    view = base.t()
    dist.all_reduce(view, async_op=True)  # dropped; torch users rely on the tensor, not the Work
    dist.barrier()
    want = sum(torch.arange(24, dtype=torch.float64).reshape(4, 6) + r for r in range(N))
    assert torch.equal(base, want), f"non-contiguous result not copied back: {base[0]} vs {want[0]}"


@check
def barrier_returns_after_every_earlier_async_collective():
    for repeat in range(5):
        tensors = [torch.full((1 + 997 * i,), float(R + i)) for i in range(16)]
        for t in tensors:
            dist.all_reduce(t, async_op=True)
        dist.barrier()
        for i, t in enumerate(tensors):
            want = float(sum(r + i for r in range(N)))
            assert torch.all(t == want), f"repeat {repeat}: tensor {i} unreduced after barrier: {t[:3]}"


@check
def waiting_for_a_later_work_implies_the_earlier_ones():
    tensors = [torch.full((1 + 4093 * i,), 1.0) for i in range(16)]
    works = [dist.all_reduce(t, async_op=True) for t in tensors]
    works[-1].wait()
    for i, (t, w) in enumerate(zip(tensors, works)):
        assert torch.all(t == N), f"tensor {i} unreduced after waiting for the last Work"
        assert w.is_completed(), f"Work {i} not completed after waiting for the last Work"


@check
def point_to_point_dropped_mid_flight():
    if N < 2:
        return
    n = 1 << 16
    if R == 0:
        t = torch.full((n,), 3.0)
        dist.isend(t, 1)  # Work and tensor dropped before rank 1 posts its receive
        del t
        gc.collect()
        verify = churn_and_verify(n)
    elif R == 1:
        time.sleep(0.5)
        got = torch.zeros(n)
        dist.recv(got, 0)
        assert torch.all(got == 3.0), got[:4]
    dist.barrier()
    if R == 0:
        verify("isend dropped mid-flight")


@check
def horovod_api_handles_and_tensors_dropped_mid_flight():
    # Horovod's API on the same engine: a handle never synchronized, its tensors dropped.
    import hvd_herring.torch as hvd
    hvd.init()  # the engine torch.distributed started
    n = 1 << 16
    if R == 0:
        t = torch.ones(n)
        hvd.allreduce_async_(t, name="dropped.inplace", op=hvd.Sum)
        u = torch.ones(n)
        hvd.allreduce_async(u, name="dropped.out_of_place", op=hvd.Sum)
        del t, u
        gc.collect()
        verify = churn_and_verify(n)
    else:
        time.sleep(0.5)
        t, u = torch.ones(n), torch.ones(n)
        hvd.allreduce_(t, name="dropped.inplace", op=hvd.Sum)
        hvd.allreduce(u, name="dropped.out_of_place", op=hvd.Sum)
    dist.barrier()
    if R == 0:
        verify("Horovod API handles dropped mid-flight")


@check
def horovod_synchronous_call_interrupted_and_its_tensor_dropped():
    # hvd.allreduce_ waits without a handle (engine.run_one). A signal handler that raises while it
    # waits ends the call with the request still pending; the engine writes the tensor when the
    # others submit, after the caller dropped it, so the call must keep that memory alive.
    import signal
    import hvd_herring.torch as hvd
    hvd.init()
    n = 1 << 16

    class Interrupted(Exception):
        pass

    def interrupt(signum, frame):
        raise Interrupted()

    # The ranks start the timed part together: a rank still busy with the previous check more than
    # 0.7 s after the others (seen on a loaded machine) would otherwise find their submissions in
    # and complete before its alarm.
    dist.barrier()
    if R == 0:
        previous = signal.signal(signal.SIGALRM, interrupt)
        t = torch.ones(n)
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        try:
            hvd.allreduce_(t, name="interrupted.inplace", op=hvd.Sum)
            raise AssertionError("allreduce_ returned before the other ranks submitted it")
        except Interrupted:
            pass
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        del t
        gc.collect()
        verify = churn_and_verify(n)
    else:
        time.sleep(1.0)
        t = torch.ones(n)
        hvd.allreduce_(t, name="interrupted.inplace", op=hvd.Sum)
        assert torch.all(t == N), f"rank {R}: allreduce_ gave {t[:4].tolist()}, expected {N}"
    dist.barrier()
    if R == 0:
        verify("Horovod synchronous call interrupted, its tensor dropped")


@check
def ddp_with_join_and_uneven_inputs_trains_to_the_reference():
    from torch.distributed.algorithms.join import Join
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)).double()
    reference = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)).double()
    reference.load_state_dict(model.state_dict())
    g = torch.Generator().manual_seed(1)
    batches = {r: [(torch.randn(4, 6, generator=g, dtype=torch.float64),
                    torch.randn(4, 1, generator=g, dtype=torch.float64)) for _ in range(3 + 2 * r)]
               for r in range(N)}
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    with Join([ddp]):
        for x, y in batches[R]:
            opt.zero_grad()
            torch.nn.functional.mse_loss(ddp(x), y).backward()
            opt.step()
    # The reference: in step i every rank that still has a batch contributes its gradient; a
    # joined rank contributes zeros and DDP divides by the initial world size.
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    for step in range(max(len(b) for b in batches.values())):
        grads = [torch.zeros_like(p) for p in reference.parameters()]
        for r in range(N):
            if step < len(batches[r]):
                reference.zero_grad()
                x, y = batches[r][step]
                torch.nn.functional.mse_loss(reference(x), y).backward()
                grads = [a + p.grad for a, p in zip(grads, reference.parameters())]
        for p, gsum in zip(reference.parameters(), grads):
            p.grad = gsum / N
        ref_opt.step()
    for i, (p, q) in enumerate(zip(model.parameters(), reference.parameters())):
        assert torch.allclose(p, q, atol=1e-10), f"parameter {i} differs from the reference by {(p - q).abs().max()}"


@check
def forked_child_gets_a_clear_error():
    # The child: its first collective must raise at once, naming the fork.
    message = forked_child.answer_of_forked_child(lambda: forked_child.message_of(lambda: dist.all_reduce(torch.ones(2))),
                                                  TIMEOUT_SECONDS)
    assert "RuntimeError" in message and "forked from process" in message and "spawn" in message, message
    t = torch.ones(3)
    dist.all_reduce(t)  # the parent's engine is untouched
    assert torch.all(t == N)


def run(rank, world_size, init, rendezvous, results_dir):
    global N, R
    timeout = timedelta(seconds=TIMEOUT_SECONDS)
    import hvd_herring.torch.distributed  # noqa: F401  (registers "herring")
    if init == "store":
        host, port = rendezvous.split(":")
        store = dist.TCPStore(host, int(port), world_size, rank == 0, timeout=timeout)
        dist.init_process_group("herring", store=store, rank=rank, world_size=world_size, timeout=timeout)
    else:
        dist.init_process_group("herring", init_method=rendezvous, rank=rank, world_size=world_size, timeout=timeout)
    N, R = dist.get_world_size(), dist.get_rank()
    run_and_report(R, selected(), report=lambda: {"size": N}, shutdown=dist.destroy_process_group,
                   directory=results_dir)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--init", choices=["tcp", "file", "store"], required=True)
    parser.add_argument("--np", type=int, required=True)
    parser.add_argument("--results", required=True)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        os.environ.pop(name, None)  # started as torch's tutorials start it: nothing in the environment
    if args.init == "file":
        rendezvous = "file://" + os.path.join(tempfile.mkdtemp(prefix="herring-file-init-"), "store")
    elif args.init == "tcp":
        rendezvous = f"tcp://127.0.0.1:{args.port}"
    else:
        rendezvous = f"127.0.0.1:{args.port}"
    mp.spawn(run, args=(args.np, args.init, rendezvous, args.results), nprocs=args.np, join=True)


if __name__ == "__main__":
    main()
