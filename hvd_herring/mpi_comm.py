"""Horovod's MPI entry points on the herring engine: `hvd.init(comm=...)` with an mpi4py
communicator (or a list of ranks of MPI.COMM_WORLD), and process sets defined by communicators.

MPI carries no collective here: the engine takes its rank and size from the communicator, learns
which ranks share a host from an MPI shared-memory split, and exchanges its endpoints with one
allgather over the communicator; everything after that runs on the engine. mpi4py is imported only
when a communicator is given (or under mpirun)."""

from hvd_herring import bootstrap


def _mpi():
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise RuntimeError("hvd.init(comm=...) and process sets from MPI communicators need mpi4py "
                           "(pip install mpi4py)") from e
    return MPI


def is_communicator(value):
    """True for an mpi4py communicator (without importing mpi4py when it was never imported)."""
    import sys
    mpi4py = sys.modules.get("mpi4py.MPI")
    return mpi4py is not None and isinstance(value, mpi4py.Comm)


def communicator_from(comm):
    """Horovod's `comm` argument: an mpi4py communicator, or a list of ranks of MPI.COMM_WORLD (every
    listed process calls init with the same list)."""
    MPI = _mpi()
    if is_communicator(comm):
        if comm == MPI.COMM_NULL:
            raise ValueError("hvd.init(comm=MPI.COMM_NULL): this process is not part of the communicator")
        return comm
    ranks = [int(r) for r in comm]
    world = MPI.COMM_WORLD
    if world.Get_rank() not in ranks:
        raise ValueError(f"hvd.init(comm={ranks}): rank {world.Get_rank()} of MPI.COMM_WORLD is not in the list")
    return world.Create_group(world.Get_group().Incl(ranks))


def is_whole_launch(comm):
    """A communicator holding every launched process: the launcher's own environment describes it."""
    MPI = _mpi()
    return comm.Get_size() == MPI.COMM_WORLD.Get_size()


def engine_start(comm):
    """(exchange, env) for an engine over `comm`: its rank and size are the communicator's, its
    local layout the communicator's shared-memory split, its endpoints exchanged with one allgather."""
    MPI = _mpi()
    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    env = bootstrap.launch_environment(comm.Get_rank(), comm.Get_size(), local_rank=local.Get_rank(),
                                       local_size=local.Get_size())
    local.Free()
    return comm.allgather, env


def ranks_in(comm, job_comm):
    """The ranks (of the job's communicator) of the processes in `comm`."""
    MPI = _mpi()
    ranks = MPI.Group.Translate_ranks(comm.Get_group(), list(range(comm.Get_size())), job_comm.Get_group())
    if any(r == MPI.UNDEFINED for r in ranks):
        raise ValueError("a process set's communicator holds processes outside the job's communicator")
    return sorted(ranks)


def static_sets_from_communicators(process_sets, job_comm):
    """Resolves process sets given as communicators into rank lists. Each rank knows only the
    communicators it belongs to (a Split gives every rank its own part), so the sets of every rank
    are gathered over `job_comm` and each distinct set is created once, in the same order on every
    rank; each ProcessSet object then stands for the set that holds its communicator's ranks."""
    mine = [ranks_in(ps.mpi_comm, job_comm) if ps.ranks is None else sorted(ps.ranks) for ps in process_sets]
    everyone = job_comm.allgather(mine)
    distinct = []
    for sets in everyone:
        for ranks in sets:
            if ranks not in distinct:
                distinct.append(ranks)
    for ps, ranks in zip(process_sets, mine):
        if ps.ranks is None:
            ps.ranks = ranks
    return distinct


def job_communicator(comm):
    """The communicator the engine runs over: the one given to init, else MPI.COMM_WORLD."""
    return comm if comm is not None else _mpi().COMM_WORLD


def threads_supported():
    """Horovod's mpi_threads_supported(): MPI initialised with MPI_THREAD_MULTIPLE."""
    MPI = _mpi()
    return MPI.Is_initialized() and MPI.Query_thread() == MPI.THREAD_MULTIPLE
