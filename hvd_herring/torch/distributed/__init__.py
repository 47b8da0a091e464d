"""torch.distributed on the herring engine: importing this module registers the backend "herring".

    import hvd_herring.torch.distributed            # registers "herring"
    torch.distributed.init_process_group("herring") # torchrun, horovodrun or mpirun

Every collective of every group runs on this process's one engine (the one Horovod's API uses
too); groups from new_group are process sets. CPU tensors only."""

import os

import torch
import torch.distributed as dist

from hvd_herring.engine_front import front
from hvd_herring.torch.distributed import lost_ranks, rendezvous, shrink
from hvd_herring.torch.distributed.hooks import average_hook
from hvd_herring.torch.distributed.process_group import HerringProcessGroup

BACKEND = "herring"

# OMP_NUM_THREADS and torch's intra-op threads when this module was first imported. A program that
# imports it (or torch) before OMP_NUM_THREADS is set, as Ray's worker_process_setup_hook did with
# `register` when a worker process started (before Ray sets it to the CPUs of the task or actor the
# worker runs), has a pool of every core of the machine, and every rank of a host ran that many
# OpenMP threads (`_threads_the_environment_asked_for`; hvd_herring.ray.worker_setup waits for
# torch's import instead).
_OMP_AT_IMPORT = os.environ.get("OMP_NUM_THREADS")
_THREADS_AT_IMPORT = torch.get_num_threads()


def _threads_the_environment_asked_for():
    """The intra-op threads OMP_NUM_THREADS asks for, where it was set after torch sized its pool
    (unset when this module imported torch) and nobody has set torch's threads since; else None.
    torch reads the variable only when it starts: set later, it would be ignored."""
    if _OMP_AT_IMPORT is not None or torch.get_num_threads() != _THREADS_AT_IMPORT:
        return None
    try:
        wanted = int(os.environ.get("OMP_NUM_THREADS", ""))
    except ValueError:
        return None
    return wanted if 0 < wanted != _THREADS_AT_IMPORT else None


def _create_process_group(options, backend_options=None):
    """torch's creator callback (extended API): called on the members of each new group."""
    rank, size = options.group_rank, options.group_size
    timeout = options.timeout.total_seconds()
    if not front.is_initialized():
        # The default group (torchrun, tcp://, file://, store=, mp.spawn): the engine takes the rank and
    # size torch hands it, and exchanges its endpoints through torch's Store.
        rendezvous.prepare_engine_environment()
        threads = _threads_the_environment_asked_for()
        if threads is not None:
            torch.set_num_threads(threads)
        front.start(exchange=rendezvous.store_exchange(options.store, rank, size, timeout),
                    env=rendezvous.launch_environment(rank, size, options.store))
        front.leaves_at_exit = True  # torch's ranks finish one at a time (engine/departures.cc)
    is_default = dist.distributed_c10d._world.default_pg is None
    ranks = list(options.global_ranks_in_group) or list(range(size))
    if len(ranks) == front.size():
        set_id = 0
        if front.rank() != ranks[rank] or front.size() != size:
            raise RuntimeError(
                f"herring: torch.distributed says rank {rank} of {size}, but the engine (launched by "
                f"{front.engine().launcher}) is rank {front.rank()} of {front.size()}")
    else:
        set_id = rendezvous.subgroup_sets.get(tuple(sorted(ranks)))
        if set_id is None:
            raise RuntimeError(f"herring: group of ranks {ranks} has no process set; create subgroups with "
                               "torch.distributed.new_group (or new_subgroups) on every rank")
    group = HerringProcessGroup(rank, size, set_id, sorted(ranks), timeout, str(options.group_id), store=options.store)
    # destroy_process_group() shuts every group down; the default one's, if torch started the
    # engine, takes this rank out of the job while the other ranks go on.
    group._leaves_job = is_default and front.leaves_at_exit
    return group


def register():
    """Registers the backend and the launcher/subgroup hooks (idempotent; done at import)."""
    if BACKEND.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND, _create_process_group, extended_api=True, devices=["cpu"])
    rendezvous.install_env_rendezvous()
    rendezvous.install_new_group_hook()
    shrink.install_shrink_hook()
    lost_ranks.install()


register()

# The ranks an error lost, for any error that carries herring's failure: DistBackendError has it as
# err.lost_ranks; DDP's backward re-raises it as a RuntimeError, which cannot take a property.
lost_ranks_of = lost_ranks.of

__all__ = ["BACKEND", "HerringProcessGroup", "average_hook", "lost_ranks_of", "register"]
