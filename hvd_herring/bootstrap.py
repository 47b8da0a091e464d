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


def store_allgather(store, rank, size, scope, timeout_seconds):
    """The engine's record exchange (mine -> every rank's record) through a torch Store that may
    hold an earlier attempt's keys: torchrun's agent keeps its store across restarts
    (--max-restarts, and the rounds of a c10d rendezvous), so a record read under a fixed key may
    be a dead process's, and the mesh would dial an endpoint nobody listens on. No variable tells
    one attempt from the next reliably: TORCHELASTIC_RESTART_COUNT can differ between nodes (an
    agent whose own workers did not fail restarts them without counting) and a scale-up restart
    keeps it. So the attempt is named through the store itself, by a round trip:

      - rank 0 takes a generation no attempt used before (store.add) and writes its record under it;
      - every other rank writes a fresh random nonce (hello/<r>); rank 0 echoes each nonce it reads,
        with the generation (echo/<r>), and keeps echoing until every rank has written its record;
      - a rank that reads its own nonce echoed knows the generation is this attempt's (a stale
        echo carries another nonce), writes its record under it and reads everyone's from there.

    Records are therefore only ever read under a key no earlier attempt wrote. `scope` is the
    key prefix (the store may be shared with other users of it). Raises TimeoutError naming the
    ranks still missing after `timeout_seconds`."""
    import secrets
    import time

    def poll_until(condition, what, deadline):
        delay = 0.001
        while not condition():
            if time.monotonic() > deadline:
                raise TimeoutError(f"herring: rank {rank}: timed out after {timeout_seconds:g} s exchanging "
                                   f"endpoints through torch's store: {what()}")
            time.sleep(delay)
            delay = min(delay * 2, 0.05)

    def missing_records(generation):
        return "no record yet from ranks " + ", ".join(
            str(r) for r in range(size) if not store.check([f"{scope}{generation}/{r}"]))

    def records_under(generation, deadline):
        keys = [f"{scope}{generation}/{r}" for r in range(size)]
        poll_until(lambda: store.check(keys), lambda: missing_records(generation), deadline)
        return [v.decode() for v in store.multi_get(keys)]

    def exchange(mine):
        deadline = time.monotonic() + timeout_seconds
        if size == 1:
            return [mine]
        if rank == 0:
            generation = store.add(scope + "generation", 1)
            store.set(f"{scope}{generation}/0", mine)
            hellos = {r: f"{scope}hello/{r}" for r in range(1, size)}
            present, echoed = [], {}

            def everyone_joined():
                for r in [r for r in hellos if r not in present]:
                    if store.check([hellos[r]]):
                        present.append(r)
                if present:
                    nonces = dict(zip(present, store.multi_get([hellos[r] for r in present])))
                    changed = [r for r in present if echoed.get(r) != nonces[r]]
                    if changed:
                        store.multi_set([f"{scope}echo/{r}" for r in changed],
                                        [f"{generation}/{nonces[r].decode()}" for r in changed])
                        echoed.update((r, nonces[r]) for r in changed)
                return store.check([f"{scope}{generation}/{r}" for r in range(size)])

            poll_until(everyone_joined, lambda: missing_records(generation), deadline)
            return records_under(generation, deadline)
        nonce = secrets.token_hex(8)
        store.set(f"{scope}hello/{rank}", nonce)
        echo = f"{scope}echo/{rank}"
        answer = []

        def echoed_mine():
            if not store.check([echo]):
                return False
            generation, _, seen = store.get(echo).decode().partition("/")
            if seen != nonce:
                return False  # an earlier attempt's, or rank 0 has not read this rank's nonce yet
            answer.append(generation)
            return True

        poll_until(echoed_mine, lambda: "rank 0 has not answered this rank's hello (is rank 0 running?)", deadline)
        store.set(f"{scope}{answer[0]}/{rank}", mine)
        return records_under(answer[0], deadline)

    return exchange


def torchrun_agent_store_exchange():
    """hvd.init() under torchrun before torch.distributed: the records go through the Store that
    torchrun's agent hosts at MASTER_ADDR:MASTER_PORT (torch.distributed's own path hands the
    engine its Store instead: hvd_herring.torch.distributed). The agent's store outlives its
    workers: store_allgather reads only this attempt's records."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        raise RuntimeError("hvd_herring was launched by torchrun without its agent's store: call "
                           "torch.distributed.init_process_group('herring') (import hvd_herring.torch.distributed) "
                           "before hvd.init()")
    from datetime import timedelta
    import torch.distributed as dist
    timeout = float(os.environ.get("HERRING_START_TIMEOUT_SECONDS", "60"))
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                          timeout=timedelta(seconds=timeout))
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    return store_allgather(store, rank, size, f"herring/hvd/{size}/", timeout)


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
