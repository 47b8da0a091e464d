"""How ranks find each other, per launcher.

horovodrun (gloo mode) runs an HTTP key-value store; the native engine uses it directly.
mpirun (Open MPI) provides no store, so endpoints are exchanged with one MPI allgather through
mpi4py (imported only in that case)."""

import os


def launched_by_mpirun():
    return "OMPI_COMM_WORLD_RANK" in os.environ and "HOROVOD_RANK" not in os.environ


def exchange_function():
    """The allgather the engine should use to exchange rendezvous records, or None when the
    engine can do it by itself (horovodrun's store, or a job of one)."""
    if not launched_by_mpirun():
        return None
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise RuntimeError(
            "hvd_herring was launched by mpirun: it needs mpi4py to exchange endpoints "
            "(pip install mpi4py)") from e

    def allgather(record):
        return MPI.COMM_WORLD.allgather(record)

    return allgather
