"""torch.distributed.shrink_group on herring: the survivors of a group go on without the ranks
they exclude, in the same processes, without the launcher.

A peer's crash fails this process's one engine for good (every group runs on it), so a shrink
starts a new engine among the survivors: the old one is aborted (what it still runs fails at
once, naming the shrink: SHRINK_ABORT's promise, kept for SHRINK_DEFAULT too since the old engine
cannot go on), and the survivors exchange endpoints through the group's own c10d Store under keys
no earlier exchange used (bootstrap.store_allgather names its attempt through the store). Their
new ranks are their places among the survivors, in order. That Store must still be served: the
rank hosting a TCPStore (MASTER_ADDR's, rank 0 under env://) cannot be the one excluded.

torch builds the shrunk group from the backend's answer with ProcessGroup._register_backend,
which takes a C++ c10d::Backend; a Python group (HerringProcessGroup) cannot be one. So torch's
_create_shrunk_process_group is wrapped to adopt the HerringProcessGroup shrink returns as the
group itself, as a Python group is its own backend (_get_backend); everything else of
shrink_group (validation, destroying the old groups, the new default group, the world's maps) is
torch's own.

Groups made on the old engine stay torch's objects until destroyed: each remembers the engine it
was made on (front.epoch) and refuses collectives once another runs, and its shutdown/abort (torch
destroys or aborts them during the shrink) leaves the new engine alone."""

import torch.distributed.distributed_c10d as c10d

from hvd_herring import bootstrap
from hvd_herring.engine_front import front
from hvd_herring.torch.distributed import rendezvous
from hvd_herring.torch.distributed.work import _in_flight

# How long an old Work may be waited for while the shrink settles them (its handle failed at the
# abort: it completes at once unless a settler thread is mid-wait on it).
_SETTLE_SECONDS = 0.05


def restart_among_survivors(group, ranks_to_exclude, shrink_flags):
    """Aborts this process's engine and starts one among the members of `group` not excluded
    (group ranks); returns (new rank, new size). Blocks until every survivor called it, at most
    the group's timeout (init_process_group / new_group's)."""
    me = group._ranks[group.rank()]  # this rank's global rank on the old engine (which may have failed)
    if group._store is None:
        raise RuntimeError(f"herring: rank {me}: process group {group._label!r} has no c10d Store to re-form "
                           "its survivors through")
    excluded = set(int(r) for r in ranks_to_exclude)
    survivors = [g for i, g in enumerate(group._ranks) if i not in excluded]
    new_rank, new_size = survivors.index(me), len(survivors)
    why = (f"rank {me} shrank process group {group._label!r} to global ranks {survivors} "
           f"(shrink_group excluding its ranks {sorted(excluded)}, flags {shrink_flags})")
    rendezvous.subgroup_sets.clear()  # the next engine numbers its sets anew
    front.abort(why)
    _in_flight.settle_all(_SETTLE_SECONDS)
    # The survivors' list names the exchange: survivors of another shrink through the same store
    # never read these keys; an earlier exchange of the same survivors is told apart by its generation.
    scope = f"herring/shrink/{group._label}/{','.join(map(str, survivors))}/"
    rendezvous.prepare_engine_environment()
    front.start(exchange=bootstrap.store_allgather(group._store, new_rank, new_size, scope, group._timeout),
                env=rendezvous.launch_environment(new_rank, new_size, group._store))
    front.leaves_at_exit = True  # as an engine torch started: its ranks finish one at a time
    return new_rank, new_size


_torch_create_shrunk_process_group = None


def _create_shrunk_process_group(new_backend, remaining_ranks, metadata, is_default_group):
    from hvd_herring.torch.distributed.process_group import HerringProcessGroup
    if not isinstance(new_backend, HerringProcessGroup):
        return _torch_create_shrunk_process_group(new_backend, remaining_ranks, metadata, is_default_group)
    # What torch sets on the ProcessGroup it would have made around a C++ backend.
    new_backend.setGroupName(metadata["new_group_name"])
    new_backend.setGroupDesc("default:shrunken" if is_default_group else f"{metadata['original_group_name']}:shrunk")
    return new_backend


def install_shrink_hook():
    global _torch_create_shrunk_process_group
    if c10d._create_shrunk_process_group is _create_shrunk_process_group:
        return
    _torch_create_shrunk_process_group = c10d._create_shrunk_process_group
    c10d._create_shrunk_process_group = _create_shrunk_process_group  # _finalize_shrunk_group looks it up here
