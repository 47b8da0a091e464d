"""The engine front shared by every framework adapter: one engine per process.

HerringBasics offers what Horovod's HorovodBasics offers (init, shutdown, rank, size, process
sets...), so Horovod's own Python layers run unchanged on top of it."""

import atexit
import os
import threading

from horovod.common import process_sets as _hvd_process_sets
from horovod.common.exceptions import HorovodInternalError
from horovod.common.process_sets import ProcessSet, global_process_set

from hvd_herring import _native, bootstrap, elastic_rendezvous, mpi_comm

OP_TYPES = _native.OP_TYPES
DTYPES = _native.DTYPES


class HerringBasics:
    """Owns this process's engine. Frameworks share one instance (`basics`).

    It also owns what outlives one engine: the slot through which native kernels (the TensorFlow
    ops) find the engine it runs now (engine_reference; native/engine/engine_slot.h), and the
    zero-copy memory (`zero_copy`), whose pool the first zero_copy_empty creates and which every
    engine it creates is handed. Nothing of this is a process-wide C++ static."""

    def __init__(self):
        self._engine = None
        self._slot = _native.EngineSlot()
        self.slot_address = self._slot.address  # where hvd_herring._torch_native finds the engine
        self._slot_owner = (None, "")  # (pid, process identity) when last read
        self.zero_copy = _native.ZeroCopyMemory()
        self._epoch = 0
        self._lock = threading.Lock()
        self._atexit_registered = False
        self._process_set_changes = 0
        ops = _native.REDUCE_OPS
        self.Average = ops["Average"]
        self.Sum = ops["Sum"]
        self.Adasum = ops["Adasum"]
        self.Min = ops["Min"]
        self.Max = ops["Max"]
        self.Product = ops["Product"]
        # The engine was started by torch.distributed, whose ranks leave one at a time: it leaves
        # the job (Engine.leave) at exit instead of Horovod's collective shutdown.
        self.leaves_at_exit = False
        self._forked_from = None  # the parent's pid, in a child forked while an engine ran
        self._job_comm = None     # the MPI communicator given to init(comm=...), if any
        os.register_at_fork(after_in_child=self._after_fork_in_child)

    @property
    def MPI_LIB_CTYPES(self):  # noqa: N802 - Horovod's name
        """Horovod's handle of its loaded core library (its Spark trainers print it): ours, the
        library the engine runs in (already loaded, so this only looks it up)."""
        import ctypes
        return ctypes.CDLL(os.path.join(os.path.dirname(os.path.abspath(__file__)), "libherring_core.so"))

    # --- lifecycle -------------------------------------------------------------------------
    def init(self, comm=None, process_sets=None, exchange=None, env=None):
        """Horovod's hvd.init(comm=None, process_sets=None). `exchange` (mine -> every rank's
        record) replaces the launcher's endpoint exchange: torch.distributed passes its Store's.
        `env` replaces the process environment as the source of the launch variables and knobs:
        torch.distributed passes one that carries the rank and size torch was given."""
        with self._lock:
            if self._engine is not None and self._engine.running:
                return
            # Horovod's comm: an mpi4py communicator or a list of MPI.COMM_WORLD ranks (empty: all).
            job_comm = None
            if comm is not None and not (isinstance(comm, (list, tuple)) and len(comm) == 0):
                job_comm = mpi_comm.communicator_from(comm)
                if exchange is None and env is None and not mpi_comm.is_whole_launch(job_comm):
                    exchange, env = mpi_comm.engine_start(job_comm)
            static_sets = []
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
            # Elastic jobs: this round's rank from horovodrun's driver, endpoints in a round scope.
            if exchange is None:
                exchange = elastic_rendezvous.prepare_init(self._epoch > 0) or bootstrap.exchange_function()
            self._job_comm = job_comm
            self._engine = _native.Engine(engine_sets, self._epoch, exchange,
                                          zero_copy=self.zero_copy, env=dict(env or {}))
            self._slot.set(self._engine)
            self._epoch += 1
            # Process-set changes are named per engine, as the engine names unnamed collectives:
            # an elastic round's newcomers start from one, so the survivors must too.
            self._process_set_changes = 0
            if self._engine.is_dedicated_server:
                self._serve_and_exit()
            if not self._atexit_registered:
                atexit.register(self.shutdown)
                self._atexit_registered = True
        _hvd_process_sets._setup(self)
        _hvd_process_sets._init_process_sets(static_sets)
        for i, ps in enumerate(static_sets):
            if ps.process_set_id is None:
                raise ValueError(
                    f"Horovod could not be initialized because process_sets entry number {i} is a duplicate: {ps}")

    def _serve_and_exit(self):
        """A dedicated server process (HERRING_DEDICATED_SERVERS) never returns to the training
        script: it serves its shards until the workers shut the job down, then exits."""
        import sys
        engine = self._engine
        failure = serve(engine)
        engine.shutdown()
        if failure:
            print(f"hvd_herring dedicated server (process {engine.rank}): {failure}", file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1 if failure else 0)

    def shutdown(self):
        """Horovod's hvd.shutdown(): agreed with every rank, it stops the job. At interpreter exit
        (atexit), an engine torch.distributed started leaves the job instead (leave())."""
        if self.leaves_at_exit:
            self.leave()
            return
        with self._lock:
            engine, self._engine = self._engine, None
        if engine is not None:
            engine.shutdown()
            self._slot.clear_if(engine)  # unless a newer engine took its place meanwhile

    def leave(self):
        """This rank leaves the job in order and the others go on (torch.distributed's
        destroy_process_group): collectives of process sets without it keep working, those with
        it fail naming it (native engine/departures.cc)."""
        with self._lock:
            engine, self._engine = self._engine, None
            self.leaves_at_exit = False
        if engine is not None:
            engine.leave()
            self._slot.clear_if(engine)

    def engine_reference(self):
        """What a native op carries to find this front's engine whenever it runs (the engine of
        the current elastic round included): the slot's address and this process's identity,
        without which the address is never followed (a graph loaded by another process)."""
        pid, owner = self._slot_owner
        if pid != os.getpid():  # read once per process (a forked child is another one)
            owner = _native.process_identity()
            self._slot_owner = (os.getpid(), owner)
        return self._slot.address, owner

    def is_initialized(self):
        return self._engine is not None and self._engine.running

    def engine(self):
        """The running engine; raises ValueError (as Horovod does) before init."""
        e = self._engine
        if e is None:
            if self._forked_from is not None:
                raise RuntimeError(
                    f"hvd_herring: this process (pid {os.getpid()}) was forked from process {self._forked_from} "
                    "after the engine started there; the engine's threads and connections stay in that "
                    "process, so a forked child cannot run collectives on it. Start workers with the 'spawn' "
                    "(or 'forkserver') method, or fork before hvd.init() / init_process_group.")
            raise ValueError("Horovod has not been initialized; use hvd.init().")
        return e

    def _after_fork_in_child(self):
        """fork() copies the engine's memory but none of its threads: this child must never use
        it (its collectives would wait for a loop thread that does not exist here) nor destroy it
        (its destructor joins those threads). Its reference is leaked, and the first collective
        raises engine()'s error."""
        self._lock = threading.Lock()  # another thread may have held it at the fork
        if self._engine is None:
            return
        import ctypes
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(self._engine))
        # The slot too: the synchronous calls read the engine from it in C++ (_torch_native), and
        # would run the parent's cycles on its sockets and shared memory. Its reference goes; the
        # one leaked above keeps the engine from being destroyed here.
        self._slot.clear_if(self._engine)
        self._engine = None
        self._forked_from = os.getppid()

    # --- topology ---------------------------------------------------------------------------
    def size(self):
        return self.engine().size

    def local_size(self):
        return self.engine().local_size

    def cross_size(self):
        return self.engine().cross_size

    def rank(self):
        return self.engine().rank

    def local_rank(self):
        return self.engine().local_rank

    def cross_rank(self):
        return self.engine().cross_rank

    def is_homogeneous(self):
        e = self.engine()
        hosts = e.hostnames
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

    # --- collectives plumbing -----------------------------------------------------------------
    def enqueue(self, op_type, name, process_set_id, dtype, reduce_op, prescale, postscale, root, tensors,
                set_ranks=(), set_id=-1, in_program_order=False, waiter_follows=False):
        """in_program_order: a name still in flight is waited behind, not rejected (torch.distributed).
        waiter_follows: the caller waits for it right away (a synchronous collective), so its own
        thread runs the cycle rather than waking the engine's loop for it (the engine's
        HERRING_CALLER_RUNS_CYCLES rule decides)."""
        try:
            return self.engine().enqueue(OP_TYPES[op_type], name or "", process_set_id, dtype, reduce_op,
                                         float(prescale), float(postscale), int(root), tensors,
                                         list(set_ranks), int(set_id), bool(in_program_order),
                                         bool(waiter_follows))
        except _native.HerringError as e:
            raise HorovodInternalError(str(e)) from e

    def enqueue_one(self, op_type, name, process_set_id, dtype, reduce_op, prescale, postscale, root,
                    input_ptr, output_ptr, shape, in_program_order=False, waiter_follows=False):
        """One tensor without splits: enqueue() without its list of tuples, the hot path of a
        training step. output_ptr 0: the engine allocates the output."""
        try:
            return self.engine().enqueue_one(OP_TYPES[op_type], name or "", process_set_id, dtype, reduce_op,
                                             prescale, postscale, root, input_ptr, output_ptr, shape,
                                             waiter_follows, in_program_order)
        except _native.HerringError as e:
            raise HorovodInternalError(str(e)) from e

    def wait_simple(self, handle, timeout=None):
        """Waits for a collective that wrote into the caller's outputs; returns its value."""
        try:
            return self.engine().wait(handle, -1.0 if timeout is None else float(timeout))
        except _native.HerringError as e:
            raise HorovodInternalError(str(e)) from e

    def wait(self, handle, dtype=0, timeout=None):
        """Blocks (without the GIL) until the collective completes; returns
        (output capsules, output shapes, received splits, value)."""
        try:
            return self.engine().wait_and_take(handle, -1.0 if timeout is None else float(timeout), dtype)
        except _native.HerringError as e:
            raise HorovodInternalError(str(e)) from e

    def poll(self, handle):
        return self.engine().poll(handle)

    def missing_ranks(self, handle, timeout):
        """The global ranks that have not submitted the collective `handle` waits for, as rank 0
        sees it; None if not known within `timeout` seconds."""
        engine = self._engine
        return None if engine is None else engine.missing_ranks(handle, float(timeout))

    def counters(self):
        return dict(self.engine().counters())

    # --- process sets (the interface horovod.common.process_sets expects) -------------------
    def _process_set_size(self, process_set_id):
        return len(self._ranks_of(process_set_id))

    def _process_set_rank(self, process_set_id):
        ranks = self._ranks_of(process_set_id)
        me = self.rank()
        if me not in ranks:
            raise ValueError("Process is not part of provided process set.")
        return ranks.index(me)

    def _ranks_of(self, process_set_id):
        try:
            return list(self.engine().process_set_ranks(int(process_set_id)))
        except ValueError:
            raise ValueError("Process set does not exist or has not been registered.")

    def _get_process_set_ids_and_ranks(self):
        e = self.engine()
        return {i: list(e.process_set_ranks(i)) for i in e.process_set_ids()}

    def _comm_process_set_id(self, comm):
        ranks = mpi_comm.ranks_in(comm, mpi_comm.job_communicator(self._job_comm))
        for set_id, members in self._get_process_set_ids_and_ranks().items():
            if sorted(members) == ranks:
                return set_id
        raise ValueError(f"no process set holds the ranks {ranks} of this communicator")

    def _add_process_set_impl(self, ranks):
        value = self._change_process_sets("add_process_set", set_ranks=sorted(int(r) for r in ranks))
        return None if value < 0 else value

    def _remove_process_set_impl(self, process_set_id):
        value = self._change_process_sets("remove_process_set", set_id=int(process_set_id))
        return None if value < 0 else value

    def _change_process_sets(self, op_type, set_ranks=(), set_id=-1):
        # A collective of every rank: ranks must call add/remove in the same order.
        self._process_set_changes += 1
        name = f"process_set.{op_type}.{self._process_set_changes}"
        handle = self.enqueue(op_type, name, 0, DTYPES["uint8"], self.Sum, 1.0, 1.0, -1, [], set_ranks, set_id)
        return self.wait(handle)[3]


def serve(engine):
    """Runs a dedicated server until the job ends or the server leaves; SIGTERM asks rank 0 to
    retire it between two steps (its ranges move to the other servers). Returns '' or the failure."""
    import signal
    previous = signal.signal(signal.SIGTERM, lambda *_: engine.request_leave(engine.rank))
    try:
        while True:
            outcome = engine.serve_until_shutdown(0.5)  # signals run between two waits
            if outcome is not None:
                return outcome
    finally:
        signal.signal(signal.SIGTERM, previous)


basics = HerringBasics()

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

__all__ = ["basics", "export_basics", "FRAMEWORK_EXPORTS", "HerringBasics", "ProcessSet", "global_process_set", "HorovodInternalError"]
