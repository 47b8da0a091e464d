"""torchft on herring: `ProcessGroupHerring`, a torchft ProcessGroup (torchft 0.2.0) whose
collectives run on this process's herring engine.

    from torchft import Manager
    from hvd_herring.torch.torchft import ProcessGroupHerring
    manager = Manager(pg=ProcessGroupHerring(), ...)

torchft's Manager calls configure(store_addr, replica_id, rank, world_size, ...) at every new
quorum, with a store address whose prefix is that quorum's (host:port/torchft/<quorum>/<rank>).
configure() reconfigures in place, in the same process: the engine of the previous configuration
is aborted (what it still runs fails at once, naming the reconfiguration), and a new engine is
started among the new members, its endpoints exchanged through that store
(hvd_herring.bootstrap.store_allgather, the exchange torch.distributed's "herring" backend and its
shrink_group use: it reads only records this attempt wrote, so a store shared by several
configurations never hands a dead endpoint). The group on it is torch.distributed's
HerringProcessGroup, wrapped by torchft's ProcessGroupWrapper.

A process runs one herring engine at a time (hvd_herring.engine_front.front): one
ProcessGroupHerring per process, as one ProcessGroupBabyGloo per replica rank. Ranks of a replica
group that are threads of one process (torchft's own tests run ranks that way) cannot each have
one; run them as processes.

Errors: a collective after a peer died fails with herring's error naming the lost rank(s)
(torch's DistBackendError), and errored() returns it from then on (also when the engine learnt of
the loss without a collective of this group failing), so the Manager skips the step and
reconfigures. abort() makes every Work in flight fail at once. Importing this module imports
nothing of Horovod."""

from contextlib import contextmanager
from datetime import timedelta
from typing import Optional

import torch
import torch.distributed as dist
from torchft.process_group import ProcessGroupWrapper, create_store_client

from hvd_herring import bootstrap
from hvd_herring.engine_front import front
from hvd_herring.torch.distributed import rendezvous
from hvd_herring.torch.distributed.process_group import HerringProcessGroup

__all__ = ["ProcessGroupHerring"]

_BACKEND_NAME = "torchft-herring"


class _NotingWork(dist.Work):
    """A herring Work whose failure (wait or future) is recorded on its ProcessGroupHerring, so that
    errored() answers it."""

    def __init__(self, pg, work):
        super().__init__()
        self._pg = pg
        self._work = work

    def wait(self, timeout: Optional[timedelta] = None) -> bool:
        try:
            return self._work.wait() if timeout is None else self._work.wait(timeout)
        except Exception as e:
            self._pg._note_error(e)
            raise

    def is_completed(self):
        return self._work.is_completed()

    def is_success(self):
        return self._work.is_success()

    def exception(self):
        return self._work.exception()

    def source_rank(self):
        return self._work.source_rank()

    def result(self):
        return self._work.result()

    def synchronize(self):
        return self._work.synchronize() if hasattr(self._work, "synchronize") else None

    def get_future(self):
        pg = self._pg

        def noted(fut):
            try:
                return fut.value()
            except Exception as e:
                pg._note_error(e)
                raise

        fut = self._work.get_future()
        if self._work.is_completed():
            # c10d's Work hands a completed Work's future completed, so that callbacks chained on it
            # run at once: torchft's _ManagedWork._set_future_callback relies on it (its callbacks
            # read a loop variable). herring's settler completes it a moment later: wait for that.
            try:
                fut.wait()
            except Exception:
                pass  # its error is read through `noted`
        return fut.then(noted)


class ProcessGroupHerring(ProcessGroupWrapper):
    """A reconfigurable herring process group for torchft (see the module's docstring).

    Args:
        timeout: the store exchange's and the collectives' timeout (set_timeout changes both).
    """

    def __init__(self, timeout: timedelta = timedelta(seconds=60)) -> None:
        super().__init__(timeout=timeout)
        self._epoch: Optional[int] = None  # front.epoch of the engine this group started
        self._error: Optional[Exception] = None
        self._configurations = 0

    # --- identity --------------------------------------------------------------------------------
    def getBackendName(self) -> str:
        return _BACKEND_NAME

    def __repr__(self) -> str:
        return f"ProcessGroupHerring(pg={self._pg}, configuration={self._configurations})"

    # --- life --------------------------------------------------------------------------------
    def configure(self, store_addr: str, replica_id: str, rank: int, world_size: int,
                  quorum_id: Optional[int] = None, group_rank: Optional[int] = None,
                  group_world_size: Optional[int] = None, global_ranks: Optional[list] = None) -> None:
        self._error = None
        # ProcessGroupWrapper.configure: records the arguments, aborts the previous configuration
        # (abort(errored=False)), opens the store client, then _create_pg.
        super().configure(store_addr, replica_id, rank, world_size, quorum_id, group_rank,
                          group_world_size, global_ranks)

    def _ours(self) -> bool:
        return self._epoch is not None and front.epoch == self._epoch and front.is_initialized()

    def _create_pg(self, store, rank: int, world_size: int):
        self._configurations += 1
        if front.is_initialized() and not self._ours() and dist.is_initialized() and \
                dist.get_backend() == "herring":
            raise RuntimeError(
                f"herring: rank {front.rank()}: this process's herring engine runs torch.distributed's default "
                "group (init_process_group('herring')); a process runs one engine, so ProcessGroupHerring "
                "cannot have its own here: use ProcessGroupGloo for torchft, or gloo for the default group")
        if front.is_initialized():
            # One left over (another ProcessGroupHerring of this process, e.g. torchft's replica
            # restarted in the same process): one engine per process.
            front.abort(f"rank {front.rank()}: torchft ProcessGroupHerring (replica {self._replica_id}) "
                        f"reconfigured this process for quorum {self._quorum_id}")
        seconds = self._timeout.total_seconds()
        rendezvous.prepare_engine_environment()
        # The prefix of store_addr is this configuration's; the scope names the world size as
        # torch.distributed's exchange does, and store_allgather's generation tells attempts apart.
        front.start(exchange=bootstrap.store_allgather(store, rank, world_size, f"herring/torchft/{world_size}/",
                                                       seconds),
                    env=rendezvous.launch_environment(rank, world_size, store))
        # An uncaught exception at exit fails the job naming it; a clean exit leaves in order.
        front.leaves_at_exit = True
        self._epoch = front.epoch
        label = f"torchft_quorum_{self._quorum_id}_replica_{self._replica_id}"
        pg = HerringProcessGroup(rank, world_size, 0, list(range(world_size)), seconds, label, store=store)
        pg._leaves_job = True
        return pg

    def abort(self, errored: bool = True) -> None:
        """torchft's abort: this configuration's engine stops at once; every Work in flight on it
        (here and on the other members) fails now, naming the abort. errored=False is
        configure()'s teardown of the previous configuration."""
        if errored:
            self.errors_logger.info("", extra={"replica_id": self._replica_id, "rank": self._rank,
                                               "quorum_id": self._quorum_id, "error": "process_group_abort"})
        if self._ours():
            why = (f"rank {front.rank()}: torchft ProcessGroupHerring (replica {self._replica_id}, quorum "
                   f"{self._quorum_id}) " + ("aborted" if errored else "reconfigured"))
            rendezvous.subgroup_sets.clear()
            front.abort(why)
            from hvd_herring.torch.distributed.work import _in_flight
            _in_flight.settle_all(0.05)
        self._epoch = None
        self._pg = None

    def shutdown(self) -> None:
        """This rank leaves in order: the other members' collectives fail naming it."""
        if self._ours():
            rendezvous.subgroup_sets.clear()
            front.leave()
        self._epoch = None
        self._pg = None

    def errored(self) -> Optional[Exception]:
        """The error of a failed collective of this configuration, or one naming the ranks the
        engine lost (it learns of a crash without a collective failing), or None."""
        if self._error is not None:
            return self._error
        if self._epoch is not None and front.epoch == self._epoch:
            lost = front.lost_ranks() if front.is_initialized() else None
            if lost:
                self._error = dist.DistBackendError(
                    f"herring: rank {front.rank()}: torchft ProcessGroupHerring (quorum {self._quorum_id}) lost "
                    f"rank(s) {', '.join(map(str, lost))}; reconfigure")
                return self._error
        return None

    def _note_error(self, e: Exception) -> None:
        if self._error is None:
            self._error = e

    def set_timeout(self, timeout: timedelta) -> None:
        self._timeout = timeout
        pg = self._pg
        if isinstance(pg, HerringProcessGroup):
            pg._timeout = timeout.total_seconds()

    # --- collectives -------------------------------------------------------------------------
    @contextmanager
    def _run_context(self):
        if self._pg is None:
            raise RuntimeError("herring: torchft ProcessGroupHerring: process group not initialized "
                               "(configure() it; an abort or shutdown ended the last configuration)")
        try:
            yield
        except Exception as e:
            self._note_error(e)
            raise

    def _wrap_work(self, work, opts):
        return _NotingWork(self, work)

    # torch's C++ names of the single-tensor forms; herring's Python group spells them as
    # torch.distributed's Python dispatch calls them.
    def allgather_into_tensor_coalesced(self, output_tensors, input_tensors, opts):
        with self._run_context():
            return self._wrap_work(self.parent.all_gather_single_coalesced(output_tensors, input_tensors, opts), opts)

    def reduce_scatter_tensor_coalesced(self, output_tensors, input_tensors, opts):
        with self._run_context():
            return self._wrap_work(
                self.parent.reduce_scatter_single_coalesced(output_tensors, input_tensors, opts), opts)
