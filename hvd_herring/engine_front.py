"""The engine front: this process's one engine, whichever framework drives it.

It holds the engine's life (start, shutdown, leave, fork), the enqueue / wait / poll calls and the
queries about ranks and process sets, and raises the engine's own errors (`HerringError`,
ValueError, TimeoutError). It imports nothing of Horovod: torch.distributed ("herring") and
torchft run on it alone. The Horovod API adapts it in hvd_herring.basics (HorovodBasics' surface,
Horovod's process sets, HorovodInternalError), which is the only place that translates errors
into Horovod's."""

import atexit
import os
import sys
import threading

from hvd_herring import _native, bootstrap, elastic_rendezvous

OP_TYPES = _native.OP_TYPES
DTYPES = _native.DTYPES
REDUCE_OPS = _native.REDUCE_OPS
HerringError = _native.HerringError


class EngineFront:
    """Owns this process's engine; `front` below is the one instance.

    It also owns what outlives one engine: the slot through which native kernels (the TensorFlow
    ops, hvd_herring._torch_native) find the engine it runs now (engine_reference;
    native/engine/engine_slot.h), and the zero-copy memory (`zero_copy`), whose pool the first
    zero_copy_empty creates and which every engine it creates is handed. Nothing of this is a
    process-wide C++ static."""

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
        self.Average, self.Sum, self.Adasum = REDUCE_OPS["Average"], REDUCE_OPS["Sum"], REDUCE_OPS["Adasum"]
        self.Min, self.Max, self.Product = REDUCE_OPS["Min"], REDUCE_OPS["Max"], REDUCE_OPS["Product"]
        # The engine was started by torch.distributed, whose ranks leave one at a time: it leaves
        # the job (Engine.leave) at exit instead of Horovod's collective shutdown.
        self.leaves_at_exit = False
        self._forked_from = None  # the parent's pid, in a child forked while an engine ran
        os.register_at_fork(after_in_child=self._after_fork_in_child)

    # --- lifecycle -------------------------------------------------------------------------
    def start(self, engine_sets=(), exchange=None, env=None):
        """Starts the engine unless one runs; returns whether this call started it.
        `engine_sets`: the static process sets (lists of global ranks). `exchange` (mine -> every
        rank's record) replaces the launcher's endpoint exchange: torch.distributed passes its
        Store's. `env` replaces the process environment as the source of the launch variables and
        knobs: torch.distributed passes one that carries the rank and size torch was given."""
        with self._lock:
            if self._engine is not None and self._engine.running:
                return False
            # Elastic jobs: this round's rank from horovodrun's driver, endpoints in a round scope.
            if exchange is None:
                exchange = elastic_rendezvous.prepare_init(self._epoch > 0) or bootstrap.exchange_function()
            self._engine = _native.Engine([list(s) for s in engine_sets], self._epoch, exchange,
                                          zero_copy=self.zero_copy, env=dict(env or {}))
            self._slot.set(self._engine)
            self._epoch += 1
            # Process-set changes are named per engine, as the engine names unnamed collectives:
            # an elastic round's newcomers start from one, so the survivors must too.
            self._process_set_changes = 0
            if self._engine.is_dedicated_server:
                self._serve_and_exit()
            if not self._atexit_registered:
                atexit.register(self._at_exit)
                self._atexit_registered = True
            return True

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
        """Agreed with every rank, it stops the job (Horovod's hvd.shutdown()). At interpreter
        exit (atexit), an engine torch.distributed started leaves the job instead (leave())."""
        if self.leaves_at_exit:
            self.leave()
            return
        with self._lock:
            engine, self._engine = self._engine, None
        if engine is not None:
            engine.shutdown()
            self._slot.clear_if(engine)  # unless a newer engine took its place meanwhile

    def _at_exit(self):
        """The interpreter's exit. An engine torch.distributed started leaves the job in order
        (shutdown() -> leave()) when the script ended or called sys.exit, but an uncaught exception
        runs the exit handlers too: that process failed, and the others must not read that it shut
        down in order, so the job fails with the cause on every rank (abort). Horovod's engine
        keeps its collective shutdown either way."""
        failure = uncaught_exception_text() if self.leaves_at_exit else ""
        engine = self._engine
        if failure and engine is not None:
            self.abort(f"rank {engine.rank} failed ({failure})")
            return
        self.shutdown()

    def abort(self, why):
        """This rank's process is failing: the job fails with `why` on every rank (they read
        "rank N aborted the job: <why>"), then this rank's engine shuts down (native
        Engine::AbortJob, engine/departures.cc). Never taken for a departure in order."""
        with self._lock:
            engine, self._engine = self._engine, None
            self.leaves_at_exit = False
        if engine is not None:
            engine.abort_job(why)
            self._slot.clear_if(engine)

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

    def lost_ranks(self):
        """The global ranks this rank's engine lost (crashed, killed or aborted; not those that
        left in order), sorted; None when no engine runs here (native Engine::LostRanks)."""
        engine = self._engine
        return None if engine is None else sorted(engine.lost_ranks())

    @property
    def epoch(self):
        """How many engines this process started: a group made on one engine compares it to know
        whether the engine it was made on is still the one that runs (shrink_group restarts it)."""
        return self._epoch

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

    # --- collectives --------------------------------------------------------------------------
    def enqueue(self, op_type, name, process_set_id, dtype, reduce_op, prescale, postscale, root, tensors,
                set_ranks=(), set_id=-1, in_program_order=False, waiter_follows=False):
        """in_program_order: a name still in flight is waited behind, not rejected (torch.distributed).
        waiter_follows: the caller waits for it right away (a synchronous collective), so its own
        thread runs the cycle rather than waking the engine's loop for it (the engine's
        HERRING_CALLER_RUNS_CYCLES rule decides)."""
        return self.engine().enqueue(OP_TYPES[op_type], name or "", process_set_id, dtype, reduce_op,
                                     float(prescale), float(postscale), int(root), tensors,
                                     list(set_ranks), int(set_id), bool(in_program_order), bool(waiter_follows))

    def enqueue_one(self, op_type, name, process_set_id, dtype, reduce_op, prescale, postscale, root,
                    input_ptr, output_ptr, shape, in_program_order=False, waiter_follows=False):
        """One tensor without splits: enqueue() without its list of tuples, the hot path of a
        training step. output_ptr 0: the engine allocates the output."""
        return self.engine().enqueue_one(OP_TYPES[op_type], name or "", process_set_id, dtype, reduce_op,
                                         prescale, postscale, root, input_ptr, output_ptr, shape,
                                         waiter_follows, in_program_order)

    def enqueue_one_work(self, keep_alive, result, op_type, name, process_set_id, dtype, reduce_op, prescale,
                         postscale, root, input_ptr, output_ptr, shape, finish=None, in_program_order=False,
                         waiter_follows=False):
        """enqueue_one, returning the request's native Work (hvd_herring._native.Work): it holds
        `keep_alive` (the tensors whose memory the engine uses) until its result is taken, waits
        without the GIL and keeps the request's error. Its result is `result`, or, for an output
        the engine allocates (output_ptr 0), finish(capsules, received splits, value)."""
        return self.engine().enqueue_one_work(keep_alive, result, OP_TYPES[op_type], name or "", process_set_id,
                                              dtype, reduce_op, prescale, postscale, root, input_ptr, output_ptr,
                                              shape, finish, in_program_order, waiter_follows)

    def work(self, keep_alive, result=None, finish=None):
        """An empty native Work on this engine, for requests enqueue() queued (Work.add(handle, dtype))."""
        return _native.Work(self.engine(), keep_alive, result, finish)

    def wait_simple(self, handle, timeout=None):
        """Waits for a collective that wrote into the caller's outputs; returns its value."""
        return self.engine().wait(handle, -1.0 if timeout is None else float(timeout))

    def wait(self, handle, dtype=0, timeout=None):
        """Blocks (without the GIL) until the collective completes; returns
        (output capsules, output shapes, received splits, value)."""
        return self.engine().wait_and_take(handle, -1.0 if timeout is None else float(timeout), dtype)

    def poll(self, handle):
        return self.engine().poll(handle)

    def missing_ranks(self, handle, timeout):
        """The global ranks that have not submitted the collective `handle` waits for, as rank 0
        sees it; None if not known within `timeout` seconds."""
        engine = self._engine
        return None if engine is None else engine.missing_ranks(handle, float(timeout))

    def counters(self):
        return dict(self.engine().counters())

    # --- process sets -------------------------------------------------------------------------
    def ranks_of(self, process_set_id):
        """The sorted global ranks of a process set; ValueError if there is none of that id."""
        try:
            return list(self.engine().process_set_ranks(int(process_set_id)))
        except ValueError:
            raise ValueError("Process set does not exist or has not been registered.")

    def process_sets(self):
        """{process set id: its global ranks} for every registered set."""
        e = self.engine()
        return {i: list(e.process_set_ranks(i)) for i in e.process_set_ids()}

    def add_process_set(self, ranks):
        """A collective of every rank (same order on all): the new set's id, or None if the set
        was already there (the engine then names no id)."""
        value = self._change_process_sets("add_process_set", set_ranks=sorted(int(r) for r in ranks))
        return None if value < 0 else value

    def remove_process_set(self, process_set_id):
        value = self._change_process_sets("remove_process_set", set_id=int(process_set_id))
        return None if value < 0 else value

    def _change_process_sets(self, op_type, set_ranks=(), set_id=-1):
        self._process_set_changes += 1
        name = f"process_set.{op_type}.{self._process_set_changes}"
        handle = self.enqueue(op_type, name, 0, DTYPES["uint8"], self.Sum, 1.0, 1.0, -1, [], set_ranks, set_id)
        return self.wait(handle)[3]


def uncaught_exception_text():
    """'uncaught exception <type>: <message>, raised at <file>:<line>' when the interpreter is exiting
    because of an uncaught exception, else ''. Python records it in sys.last_value (sys.last_exc
    from 3.12) before it runs the exit handlers, whatever sys.excepthook does; sys.exit()
    (SystemExit) records nothing. An interactive session records every error it showed, none of
    which ends it: there, nothing counts."""
    if hasattr(sys, "ps1") or sys.flags.interactive:
        return ""
    error = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
    if error is None or isinstance(error, SystemExit):
        return ""
    lines = str(error).strip().splitlines()
    message = lines[0] if lines else ""
    if len(message) > 300 or len(lines) > 1:
        message = message[:300] + " ..."
    text = f"uncaught exception {type(error).__name__}" + (f": {message}" if message else "")
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is not None:
        text += f", raised at {os.path.basename(tb.tb_frame.f_code.co_filename)}:{tb.tb_lineno}"
    return text


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


front = EngineFront()
