"""The Work objects the herring process group returns: wait(timeout), is_completed, exception and
get_future over the engine's handles (and point-to-point transfers).

A Work is made of parts (engine handles or transfers) and a `finish` that turns their results
into the caller's outputs (copies, slices). Whoever waits first does the waiting and the
finishing, under the Work's lock: the caller's thread for wait(), or a settler thread once someone
asked for a future (DDP and its comm hooks do, then block in C++ on the future).

A future's callbacks run on the thread that sets its result, and comm hooks' callbacks block on
the futures of the collectives they issue (PowerSGD): so futures asked for on the application's
threads are set by settler 1, those asked for inside settler 1's callbacks by settler 2, and so
on; no settler ever waits for a future that only it could set. The collectives' names do not
depend on which thread runs what (naming.py)."""

import queue
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.utils.dlpack
from hvd_herring.basics import basics
from hvd_herring.torch.distributed.naming import HerringFuture


class EnginePart:
    """One engine collective. `dtype` is None when the outputs are the caller's (nothing to take
    but the value); otherwise the engine allocated them and they are returned as tensors."""

    def __init__(self, handle, dtype=None):
        self.handle, self.dtype = handle, dtype

    def ready(self):
        return basics.poll(self.handle)

    def wait(self, timeout):
        if self.dtype is None:
            return basics.wait_simple(self.handle, timeout)
        capsules, _, received_splits, _ = basics.wait(self.handle, self.dtype, timeout)
        return [torch.utils.dlpack.from_dlpack(c) for c in capsules], received_splits


class TransferPart:
    """One point-to-point transfer (engine/p2p.cc)."""

    def __init__(self, transfer):
        self.transfer = transfer

    def ready(self):
        return self.transfer.done

    def wait(self, timeout):
        if not self.transfer.wait(-1.0 if timeout is None else timeout):
            raise TimeoutError("transfer still pending")
        return None


def _seconds(timeout):
    """c10d's timeouts: a timedelta, where zero or negative means 'the group's default'."""
    if timeout is None:
        return None
    if isinstance(timeout, timedelta):
        timeout = timeout.total_seconds()
    return None if timeout <= 0 else float(timeout)


class HerringWork(dist.Work):
    def __init__(self, what, parts, finish, result, default_timeout, keep_alive=(), chain="torch"):
        super().__init__()
        self._chain = chain              # the name its future's callbacks name their collectives after
        self._what = what                # for errors: "allreduce of process group 'default_pg'"
        self._parts = parts
        self._finish = finish            # results of the parts -> None (writes the outputs)
        self._result = result            # what the future holds (a list of tensors)
        self._default_timeout = default_timeout
        self._keep_alive = keep_alive    # tensors whose memory the engine reads or writes
        self._lock = threading.Lock()
        self._done = False
        self._exception = None
        self._values = []
        self._future = None
        self._future_lock = threading.Lock()

    # --- c10d's Work interface ---------------------------------------------------------------
    def wait(self, timeout=None):
        seconds = _seconds(timeout)
        self._complete(self._default_timeout if seconds is None else seconds)
        return True

    def is_completed(self):
        if self._done:
            return True
        if not self._lock.acquire(blocking=False):
            return False  # somebody is completing it right now
        try:
            if self._done:
                return True
            ready = all(part.ready() for part in self._parts[len(self._values):])
        finally:
            self._lock.release()
        if ready:
            try:
                self._complete(self._default_timeout)
            except Exception:
                pass  # kept in exception()
        return self._done

    def is_success(self):
        return self._done and self._exception is None

    def exception(self):
        return self._exception

    def result(self):
        return self._result

    def get_future(self):
        with self._future_lock:
            if self._future is None:
                self._future = HerringFuture(self._chain)
                _settler_below_this_thread().submit(self)
            return self._future

    # --- the waiting -------------------------------------------------------------------------
    def _complete(self, timeout):
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._lock.acquire(timeout=-1 if timeout is None else timeout):
            raise self._timeout_error(timeout)
        try:
            if not self._done:
                try:
                    while len(self._values) < len(self._parts):
                        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                        self._values.append(self._parts[len(self._values)].wait(remaining))
                    self._finish(self._values)
                except TimeoutError:
                    # Still pending: may be waited again. The engine keeps writing into the
                    # tensors, so they must outlive this Work even if the caller drops it.
                    _keep_until_done(self)
                    raise self._timeout_error(timeout) from None
                except Exception as e:  # the engine's error (a lost rank, a mismatch): final
                    self._exception = _as_dist_error(f"herring: {self._what} failed: {e}", e)
                self._done = True
                self._values = None
                self._keep_alive = ()
        finally:
            self._lock.release()
        if self._exception is not None:
            raise self._exception

    def _settle(self):
        """Sets the future: the result, the error, or (still pending) the timeout error."""
        with self._future_lock:
            future = self._future
        if future.done():
            return
        if not self._done:
            future.set_exception(self._timeout_error(self._default_timeout))
        elif self._exception is not None:
            future.set_exception(self._exception)
        else:
            future.set_result(self._result)

    def _timeout_error(self, timeout):
        return _as_dist_error(f"herring: {self._what} timed out after {timeout:g} s (the timeout of "
                              f"init_process_group / new_group, or of Work.wait); it is still pending")


_timed_out = []  # Works that timed out, kept (with their tensors) until the engine finishes them
_timed_out_lock = threading.Lock()


def _keep_until_done(work):
    with _timed_out_lock:
        _timed_out[:] = [w for w in _timed_out if w is not work and not w.is_completed()] + [work]


def _as_dist_error(message, cause=None):
    error = dist.DistBackendError(message)
    error.__cause__ = cause
    return error


class CompletedWork(HerringWork):
    """A collective that needed no communication (an empty list)."""

    def __init__(self, result, what="collective"):
        super().__init__(what, [], lambda values: None, result, None)
        self._done = True


# --- settlers -------------------------------------------------------------------------------------

_thread_role = threading.local()   # .depth: 0 on the application's threads, d on settler d


def _depth():
    return getattr(_thread_role, "depth", 0)


class _Settler:
    """Completes, then settles, the Works whose futures were asked for on threads of depth
    `depth - 1`, one at a time, in the order they were asked for; waits without the GIL."""

    def __init__(self, depth):
        self.depth = depth
        self._queue = queue.SimpleQueue()
        threading.Thread(target=self._run, name=f"herring-torch-futures-{depth}", daemon=True).start()

    def submit(self, work):
        self._queue.put(work)

    def _run(self):
        _thread_role.depth = self.depth
        while True:
            work = self._queue.get()
            try:
                work._complete(work._default_timeout)
            except Exception:
                pass  # the error (or the timeout) goes to the future
            try:
                work._settle()
            except Exception:
                pass  # a callback's error is the future's; nothing may stop this thread


_settlers = []
_settlers_lock = threading.Lock()


def _settler_below_this_thread():
    depth = _depth() + 1
    with _settlers_lock:
        while len(_settlers) < depth:
            _settlers.append(_Settler(len(_settlers) + 1))
        return _settlers[depth - 1]
