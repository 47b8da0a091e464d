"""How ranks find each other, per launcher.

horovodrun (gloo mode) runs an HTTP key-value store; the native engine uses it directly.
mpirun (Open MPI) provides no store, so endpoints are exchanged with one MPI allgather through
mpi4py (imported only in that case). torchrun: through torch's Store (see
torchrun_agent_store_exchange, and hvd_herring.torch.distributed)."""

import os


# The variables by which a launcher says where a process stands in its job (launch_env.cc reads
# them): horovodrun's and mpirun's name the launcher's job, torchrun's local layout belongs to the
# rank torchrun gave. Under a rank handed to the engine explicitly they describe another job.
_LAUNCHER_RANK_VARIABLES = ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK")
_TORCHRUN_LOCAL_VARIABLES = ("LOCAL_RANK", "LOCAL_WORLD_SIZE")


def launch_environment(rank, size, local_rank=None, local_size=None, master_addr=None):
    """The environment an engine reads its place in the job from when its rank and size are given
    by the caller (torch.distributed's init_process_group, an MPI communicator) rather than by the
    launcher: the given ones win over the process environment. The local layout is the given one,
    else torchrun's when it belongs to this rank, else the engine derives it from the hostnames the
    ranks exchange; `master_addr` (a tcp:// store's host) tells it whether the job may be all on
    this host."""
    env = dict(os.environ)
    if env.get("RANK") != str(rank) or env.get("WORLD_SIZE") != str(size):
        for name in _TORCHRUN_LOCAL_VARIABLES:
            env.pop(name, None)
    for name in _LAUNCHER_RANK_VARIABLES:
        env.pop(name, None)
    env["RANK"], env["WORLD_SIZE"] = str(rank), str(size)
    if local_rank is not None:
        env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"] = str(local_rank), str(local_size)
    if master_addr and "MASTER_ADDR" not in env:
        env["MASTER_ADDR"] = master_addr
    return env


def launched_by_mpirun():
    return "OMPI_COMM_WORLD_RANK" in os.environ and "HOROVOD_RANK" not in os.environ


def launched_by_torchrun():
    return ("RANK" in os.environ and "WORLD_SIZE" in os.environ and "HOROVOD_RANK" not in os.environ
            and "OMPI_COMM_WORLD_RANK" not in os.environ)


_torchrun_exchanges = 0


def torchrun_agent_store_exchange():
    """hvd.init() under torchrun before torch.distributed: the records go through the Store that
    torchrun's agent hosts at MASTER_ADDR:MASTER_PORT (torch.distributed's own path hands the
    engine its Store instead: hvd_herring.torch.distributed)."""
    global _torchrun_exchanges
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        raise RuntimeError("hvd_herring was launched by torchrun without its agent's store: call "
                           "torch.distributed.init_process_group('herring') (import hvd_herring.torch.distributed) "
                           "before hvd.init()")
    from datetime import timedelta
    import torch.distributed as dist
    timeout = timedelta(seconds=float(os.environ.get("HERRING_START_TIMEOUT_SECONDS", "60")))
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                          timeout=timeout)
    prefix = f"herring/hvd/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/{_torchrun_exchanges}/"
    _torchrun_exchanges += 1
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])

    def exchange(record):
        store.set(prefix + str(rank), record)
        keys = [prefix + str(r) for r in range(size)]
        store.wait(keys, timeout)
        return [store.get(k).decode() for k in keys]

    return exchange


def exchange_function():
    """The allgather the engine should use to exchange rendezvous records, or None when the
    engine can do it by itself (horovodrun's store, or a job of one)."""
    if launched_by_torchrun() and int(os.environ["WORLD_SIZE"]) > 1:
        return torchrun_agent_store_exchange()
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
