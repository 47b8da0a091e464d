"""The Horovod adapter: HorovodBasics' surface (init with comm and process sets, size, rank,
what was built, timelines, Horovod's process sets) over the engine front
(hvd_herring.engine_front), so Horovod's own Python layers run unchanged on top of it.

This is the one place where the engine's errors become Horovod's: `horovod_error` turns a
HerringError into a HorovodInternalError, and every Horovod-facing call goes through it. Needs
Horovod installed (the `horovod` extra); torch.distributed and torchft use the front alone."""

import functools
import os

from horovod.common import process_sets as _hvd_process_sets
from horovod.common.exceptions import HorovodInternalError
from horovod.common.process_sets import ProcessSet, global_process_set

from hvd_herring import bootstrap, mpi_comm
from hvd_herring.engine_front import DTYPES, OP_TYPES, HerringError, front, serve  # noqa: F401  (re-exported)


def horovod_error(error):
    """The HorovodInternalError a Horovod caller sees for the engine's HerringError `error`
    (raise it `from error`): Horovod's elastic mode and tests catch that type."""
    return HorovodInternalError(str(error))


def _with_horovod_errors(call):
    @functools.wraps(call)
    def translated(*args, **kwargs):
        try:
            return call(*args, **kwargs)
        except HerringError as e:
            raise horovod_error(e) from e
    return translated


class HerringBasics:
    """Horovod's HorovodBasics on the engine front. Holds no engine of its own: the front's one
    engine serves the Horovod API and torch.distributed alike (`basics` below is the instance)."""

    # The front's calls a Horovod caller makes as they are: nothing in them raises HerringError.
    _AS_THEY_ARE = ("shutdown", "leave", "engine_reference", "is_initialized", "engine", "size", "local_size",
                    "cross_size", "rank", "local_rank", "cross_rank", "poll", "missing_ranks", "counters")
    # ... and those whose engine errors become HorovodInternalError.
    _TRANSLATED = ("enqueue", "enqueue_one", "wait_simple", "wait")

    def __init__(self, engine_front):
        self._front = engine_front
        self.zero_copy = engine_front.zero_copy
        self.slot_address = engine_front.slot_address
        self.Average, self.Sum, self.Adasum = engine_front.Average, engine_front.Sum, engine_front.Adasum
        self.Min, self.Max, self.Product = engine_front.Min, engine_front.Max, engine_front.Product
        for name in self._AS_THEY_ARE:
            setattr(self, name, getattr(engine_front, name))
        for name in self._TRANSLATED:
            setattr(self, name, _with_horovod_errors(getattr(engine_front, name)))
        self._job_comm = None       # the MPI communicator given to init(comm=...), if any
        self._sets_epoch = None     # the engine (front's epoch) Horovod's process sets were set up for

    @property
    def MPI_LIB_CTYPES(self):  # noqa: N802 - Horovod's name
        """Horovod's handle of its loaded core library (its Spark trainers print it): ours, the
        library the engine runs in (already loaded, so this only looks it up)."""
        import ctypes
        return ctypes.CDLL(os.path.join(os.path.dirname(os.path.abspath(__file__)), "libherring_core.so"))

    # --- lifecycle -------------------------------------------------------------------------
    def init(self, comm=None, process_sets=None, exchange=None, env=None):
        """Horovod's hvd.init(comm=None, process_sets=None); `exchange` and `env` as in
        EngineFront.start. An engine already running (started by torch.distributed, or an
        earlier hvd.init()) is kept: only Horovod's process sets are set up on it."""
        static_sets = []
        if not self._front.is_initialized():
            # Horovod's comm: an mpi4py communicator or a list of MPI.COMM_WORLD ranks (empty: all).
            job_comm = None
            if comm is not None and not (isinstance(comm, (list, tuple)) and len(comm) == 0):
                job_comm = mpi_comm.communicator_from(comm)
                if exchange is None and env is None and not mpi_comm.is_whole_launch(job_comm):
                    exchange, env = mpi_comm.engine_start(job_comm)
            if isinstance(process_sets, str):
                if process_sets.lower() != "dynamic":
                    raise ValueError(f"process_sets must be a list or 'dynamic', not {process_sets!r}")
                os.environ["HOROVOD_DYNAMIC_PROCESS_SETS"] = "1"
            elif process_sets:
                static_sets = list(process_sets)
            if any(ps.ranks is None for ps in static_sets):  # sets given as MPI communicators
                engine_sets = mpi_comm.static_sets_from_communicators(static_sets,
                                                                      mpi_comm.job_communicator(job_comm))
            else:
                engine_sets = [list(ps.ranks) for ps in static_sets]
            with _translated_errors():
                if self._front.start(engine_sets, exchange, env):
                    self._job_comm = job_comm
        if self._sets_epoch == self._front._epoch:
            return
        self._sets_epoch = self._front._epoch
        _hvd_process_sets._setup(self)
        _hvd_process_sets._init_process_sets(static_sets)
        for i, ps in enumerate(static_sets):
            if ps.process_set_id is None:
                raise ValueError(
                    f"Horovod could not be initialized because process_sets entry number {i} is a duplicate: {ps}")

    def is_homogeneous(self):
        hosts = self.engine().hostnames
        counts = {h: hosts.count(h) for h in hosts}
        return len(set(counts.values())) == 1

    # --- what was built ----------------------------------------------------------------------
    def mpi_threads_supported(self):
        return self.mpi_enabled() and mpi_comm.threads_supported()

    def mpi_enabled(self):
        return bootstrap.launched_by_mpirun()

    def mpi_built(self):
        # horovodrun --mpi checks this before launching: the MPI launch path needs mpi4py (for the
        # endpoint exchange and communicators); MPI carries no collective.
        import importlib.util
        return importlib.util.find_spec("mpi4py") is not None

    def gloo_enabled(self):
        return self.is_initialized()

    def gloo_built(self):
        # horovodrun --gloo checks this before launching: the herring engine takes gloo's place.
        return True

    def nccl_built(self):
        return False

    def ddl_built(self):
        return False

    def ccl_built(self):
        return False

    def cuda_built(self):
        return False

    def rocm_built(self):
        return False

    def start_timeline(self, file_path, mark_cycles=False):
        """Horovod's: starts writing the timeline to file_path (rank r: .rank<r> before the
        extension); needs HOROVOD_TIMELINE set (a path or DYNAMIC), as in Horovod."""
        self.engine().start_timeline(str(file_path), bool(mark_cycles))

    def stop_timeline(self):
        """Horovod's: stops the timeline and closes its file."""
        self.engine().stop_timeline()

    def check_adasum(self, process_set):
        """Horovod's own conditions for op=Adasum on CPU, raised as Horovod raises them, before
        anything is queued (the engine checks dtype and size again: AdasumUnsupportedReason)."""
        if process_set is not None and process_set.process_set_id != 0:
            raise NotImplementedError("Adasum does not support non-global process sets yet.")
        size = self.size()
        if size & (size - 1):
            raise NotImplementedError("Running Adasum with non-power of 2 ranks is not supported yet.")

    # --- process sets (the interface horovod.common.process_sets expects) -------------------
    def _process_set_size(self, process_set_id):
        return len(self._front.ranks_of(process_set_id))

    def _process_set_rank(self, process_set_id):
        ranks = self._front.ranks_of(process_set_id)
        me = self.rank()
        if me not in ranks:
            raise ValueError("Process is not part of provided process set.")
        return ranks.index(me)

    def _ranks_of(self, process_set_id):
        return self._front.ranks_of(process_set_id)

    def _get_process_set_ids_and_ranks(self):
        return self._front.process_sets()

    def _comm_process_set_id(self, comm):
        ranks = mpi_comm.ranks_in(comm, mpi_comm.job_communicator(self._job_comm))
        for set_id, members in self._get_process_set_ids_and_ranks().items():
            if sorted(members) == ranks:
                return set_id
        raise ValueError(f"no process set holds the ranks {ranks} of this communicator")

    def _add_process_set_impl(self, ranks):
        with _translated_errors():
            return self._front.add_process_set(ranks)

    def _remove_process_set_impl(self, process_set_id):
        with _translated_errors():
            return self._front.remove_process_set(process_set_id)


class _translated_errors:  # noqa: N801 - used as a `with` statement
    """`with _translated_errors():` raises the engine's HerringError as horovod_error's."""

    def __enter__(self):
        return self

    def __exit__(self, kind, error, traceback):
        if isinstance(error, HerringError):
            raise horovod_error(error) from error
        return False


basics = HerringBasics(front)

# What every framework module of Horovod re-exports from its basics object, under the same names.
FRAMEWORK_EXPORTS = (
    "is_initialized", "start_timeline", "stop_timeline", "size", "local_size", "cross_size", "rank",
    "local_rank", "cross_rank", "is_homogeneous", "mpi_threads_supported", "mpi_enabled", "mpi_built",
    "gloo_enabled", "gloo_built", "nccl_built", "ddl_built", "ccl_built", "cuda_built", "rocm_built",
    "Average", "Sum", "Adasum", "Min", "Max", "Product",
)


def export_basics(namespace):
    """Binds FRAMEWORK_EXPORTS into a framework module's namespace (hvd.size, hvd.Sum...)."""
    for name in FRAMEWORK_EXPORTS:
        namespace[name] = getattr(basics, name)


__all__ = ["basics", "export_basics", "FRAMEWORK_EXPORTS", "HerringBasics", "ProcessSet", "global_process_set",
           "HorovodInternalError", "horovod_error"]
