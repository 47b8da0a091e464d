"""torch.distributed on the herring engine: importing this module registers the backend "herring".

    import hvd_herring.torch.distributed            # registers "herring"
    torch.distributed.init_process_group("herring") # torchrun, horovodrun or mpirun

Every collective of every group runs on this process's one engine (the one Horovod's API uses
too); groups from new_group are process sets. CPU tensors only."""

import torch.distributed as dist

from hvd_herring.engine_front import front
from hvd_herring.torch.distributed import lost_ranks, rendezvous, shrink
from hvd_herring.torch.distributed.hooks import average_hook
from hvd_herring.torch.distributed.process_group import HerringProcessGroup

BACKEND = "herring"


def _create_process_group(options, backend_options=None):
    """torch's creator callback (extended API): called on the members of each new group."""
    rank, size = options.group_rank, options.group_size
    timeout = options.timeout.total_seconds()
    if not front.is_initialized():
        # The default group (torchrun, tcp://, file://, store=, mp.spawn): the engine takes the rank and
    # size torch hands it, and exchanges its endpoints through torch's Store.
        rendezvous.prepare_engine_environment()
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
