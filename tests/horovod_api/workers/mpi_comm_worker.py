"""Runs inside every rank under mpirun (or horovodrun --mpi): Horovod's MPI entry points on the
herring engine. hvd.init(comm=...) with a sub-communicator (each half of the job an engine of its
own), process sets defined by communicators, and the mpi_* answers. Results go to
$HERRING_TEST_RESULTS/<world rank>.json, one entry per check."""

import torch
from mpi4py import MPI

import hvd_herring.torch as hvd
from checks import CHECKS, check, run_and_report

WORLD = MPI.COMM_WORLD
RANK, SIZE = WORLD.Get_rank(), WORLD.Get_size()


def shutdown(comm=WORLD):
    """Horovod's shutdown stops the whole job (every rank of the engine): wait for everyone first,
    as Horovod's own process-set test does."""
    comm.Barrier()
    hvd.shutdown()


@check
def mpi_answers_are_consistent():
    hvd.init()
    assert hvd.mpi_built() and hvd.mpi_enabled(), (hvd.mpi_built(), hvd.mpi_enabled())
    assert hvd.mpi_threads_supported() == (MPI.Query_thread() == MPI.THREAD_MULTIPLE)
    assert (hvd.rank(), hvd.size()) == (RANK, SIZE)
    out = hvd.allreduce(torch.ones(3), op=hvd.Sum, name="mpi.world")
    assert torch.equal(out, torch.full((3,), float(SIZE)))
    shutdown()


@check
def init_with_a_sub_communicator_runs_a_job_of_its_own():
    color = RANK % 2
    sub = WORLD.Split(color, RANK)
    hvd.init(comm=sub)
    assert (hvd.rank(), hvd.size()) == (sub.Get_rank(), sub.Get_size()), (hvd.rank(), hvd.size())
    members = [r for r in range(SIZE) if r % 2 == color]
    out = hvd.allreduce(torch.tensor([float(RANK)]), op=hvd.Sum, name="mpi.sub")
    assert out.item() == float(sum(members)), (out, members)
    gathered = hvd.allgather(torch.tensor([RANK]), name="mpi.sub.gather")
    assert gathered.tolist() == members, gathered
    shutdown(sub)
    sub.Free()


@check
def init_with_the_list_of_every_rank_is_the_whole_job():
    hvd.init(comm=list(range(SIZE)))
    assert (hvd.rank(), hvd.size()) == (RANK, SIZE)
    shutdown()


@check
def process_sets_from_communicators():
    halves = WORLD.Split(RANK // 2, RANK)  # {0, 1}, {2, 3}, ...
    ps = hvd.ProcessSet(halves)
    hvd.init(process_sets=[ps])
    mine = sorted(r for r in range(SIZE) if r // 2 == RANK // 2)
    assert ps.ranks == mine, (ps.ranks, mine)
    assert ps.process_set_id == hvd.mpi_ops._basics._comm_process_set_id(halves)
    every = hvd.mpi_ops._basics._get_process_set_ids_and_ranks()
    want = {0: list(range(SIZE))}
    for i, first in enumerate(range(0, SIZE, 2)):
        want[i + 1] = list(range(first, min(first + 2, SIZE)))
    assert every == want, every
    out = hvd.allreduce(torch.tensor([float(RANK)]), op=hvd.Sum, process_set=ps, name="mpi.ps")
    assert out.item() == float(sum(mine)), out
    shutdown()
    halves.Free()


def after_each(fn, results, seconds):
    """A failed check may leave its engine running: shut it down; every rank starts the next check together."""
    if results[fn.__name__] != "ok":
        try:
            hvd.shutdown()
        except Exception:  # noqa: BLE001
            pass
    WORLD.Barrier()


def main():
    run_and_report(RANK, CHECKS, after_each=after_each)  # exits 0 with failed checks too: the test reads them


if __name__ == "__main__":
    main()
