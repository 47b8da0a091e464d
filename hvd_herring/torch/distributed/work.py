"""The Work objects the herring process group returns: c10d's wait(timeout), is_completed,
exception and get_future over the engine's own Works (hvd_herring._native.Work, the one the
Horovod API hands out: it holds the tensors the engine uses, the result or error, and waits
without the GIL) and point-to-point transfers.

A Work is made of parts (native Works or transfers) and a `finish` that turns their results
into the caller's outputs (copies, slices). Whoever waits first does the waiting and the
finishing, under the Work's lock: the caller's thread for wait(), or a settler thread once someone
asked for a future (DDP and its comm hooks do, then block in C++ on the future).

Until its collective is complete, a Work belongs to the process's in-flight registry as well as
to its caller (`_in_flight`): the engine reads and writes the Work's tensors, so they must live
even when the caller drops the Work, the tensors or the future at any point (DDP's Join drops the
Work of its per-step allreduce). A dropped Work is finished (results copied into non-contiguous
outputs) when a later collective is issued or waited. The registry is also what orders a group's
Works as c10d does: waiting for a Work (barrier's included) first finishes every collective the
same group issued before it.

A future's callbacks run on the thread that sets its result, and comm hooks' callbacks block on
the futures of the collectives they issue (PowerSGD): so futures asked for on the application's
threads are set by settler 1, those asked for inside settler 1's callbacks by settler 2, and so
on; no settler ever waits for a future that only it could set. The collectives' names do not
depend on which thread runs what (naming.py)."""

import collections
import itertools
import queue
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from hvd_herring.engine_front import front
from hvd_herring.torch.distributed.naming import HerringFuture, raising_when_read_by_cpp
from hvd_herring.torch.storage_hold import held


class EnginePart:
    """One engine collective, held by its native Work (hvd_herring._native.Work, the one the
    Horovod API hands out too): the Work holds the tensors the engine reads and writes until its
    result is taken, keeps the request's error, and waits without the GIL. Its value is None for
    outputs the caller provided, else (tensors, received splits) for those the engine allocated."""

    def __init__(self, work):
        self.work = work

    @property
    def handle(self):
        return self.work.handle

    def ready(self):
        return self.work.poll()

    def wait(self, timeout):
        return self.work.result(timeout)


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
    """`ordered_in`: the key (a process set) whose earlier Works this one's wait() finishes first;
    None for point-to-point transfers, which c10d does not order with the collectives."""

    def __init__(self, what, parts, finish, result, default_timeout, keep_alive=(), chain="torch",
                 ordered_in=None):
        super().__init__()
        self._chain = chain              # the name its future's callbacks name their collectives after
        self._what = what                # for errors: "allreduce of process group 'default_pg'"
        self._parts = parts
        self._finish = finish            # results of the parts -> None (writes the outputs)
        self._result = result            # what the future holds (a list of tensors)
        self._default_timeout = default_timeout
        # The tensors whose memory the engine reads or writes, and a hold on their storages.
        self._keep_alive = held(keep_alive) if parts else ()
        self._lock = threading.Lock()
        self._done = False
        self._exception = None
        self._values = []
        self._future = None
        self._future_lock = threading.Lock()
        self._ordered_in = ordered_in
        self._sequence = None            # its place in the issue order (_in_flight.add)
        if parts:
            _in_flight.add(self)

    # --- c10d's Work interface ---------------------------------------------------------------
    def wait(self, timeout=None):
        seconds = _seconds(timeout)
        self._complete_in_order(self._default_timeout if seconds is None else seconds)
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

    def source_rank(self):
        """The group rank a receive got its message from (c10d's Work.source_rank, which torch's
        recv without a source asks once the Work is complete)."""
        source = getattr(self, "_source", None)
        if source is None:
            raise RuntimeError("sourceRank() may only be called on work objects that correspond to a recv or "
                               "recv-from-any call.")
        self._complete_in_order(self._default_timeout)
        return source()

    _source_rank = source_rank

    def get_future(self):
        with self._future_lock:
            if self._future is None:
                self._future = HerringFuture(self._chain)
                _settler_below_this_thread().submit(self)
            return self._future

    # --- the waiting -------------------------------------------------------------------------
    def _complete_in_order(self, timeout):
        """c10d's order: the collectives of this group issued before this one finish first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for earlier in _in_flight.issued_before(self):
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                earlier._complete(remaining)
            except Exception:
                if not earlier._done:  # still pending: this one cannot be complete in c10d's order
                    raise self._timeout_error(timeout, f"; the {earlier._what} issued before it is still "
                                                       "pending") from None
                # otherwise the earlier Work's own error, kept in its exception(), not this one's
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        self._complete(remaining, timeout)

    def _complete(self, timeout, reported_timeout=None):
        """Waits up to `timeout` seconds (None: for ever); errors name `reported_timeout` (what the
        caller asked for) when given."""
        reported = timeout if reported_timeout is None else reported_timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._lock.acquire(timeout=-1 if timeout is None else timeout):
            raise self._timeout_error(reported)
        try:
            if not self._done:
                try:
                    _wait_and_finish(self._parts, self._values, self._finish, deadline)
                except TimeoutError:
                    # Still pending: may be waited again. The in-flight registry keeps it (and the
                    # tensors the engine still writes) until it completes.
                    raise self._timeout_error(reported) from None
                except Exception as e:  # the engine's error (a lost rank, a mismatch): final
                    self._exception = _failed(self._what, e)
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
            future.set_exception(raising_when_read_by_cpp(self._timeout_error(self._default_timeout)))
        elif self._exception is not None:
            future.set_exception(raising_when_read_by_cpp(self._exception))
        else:
            future.set_result(self._result)

    def _timeout_error(self, timeout, why=""):
        return _as_dist_error(f"herring: {self._what} timed out after {timeout:g} s (the timeout of "
                              f"init_process_group / new_group, or of Work.wait); it is still pending{why}"
                              f"{self._who_is_missing(timeout)}")

    def _who_is_missing(self, timeout):
        """What rank 0 knows of the members that have not issued the collective this Work still
        waits for (asked for at most _EXPLAIN_SECONDS more), as the end of a timeout's message."""
        values = self._values if self._values is not None else ()
        part = self._parts[len(values)] if len(values) < len(self._parts) else None
        if not isinstance(part, EnginePart):
            return ""
        try:
            missing = front.missing_ranks(part.handle, min(_EXPLAIN_SECONDS, max(0.5, timeout)))
        except RuntimeError:  # the engine's error (it failed meanwhile): the timeout is still the one to report
            return ""
        if missing is None:
            return ""
        if not missing:
            return "; every member has issued it (as rank 0 sees it)"
        ranks = ", ".join(str(r) for r in missing)
        return (f"; global rank{'s' if len(missing) > 1 else ''} {ranks} "
                f"{'have' if len(missing) > 1 else 'has'} not issued it (as rank 0 sees it)")


class _InFlight:
    """Every Work whose collective the engine may still be running, in issue order. Holding them
    keeps their tensors alive whatever the caller drops; they leave once complete, found so from
    the oldest on when a Work is added (a full sweep when the oldest stays pending long), or when
    the caller waits."""

    _FIRST_SWEEP = 256   # Works held behind a pending oldest one before every one is looked at

    def __init__(self):
        self._works = collections.deque()
        self._lock = threading.Lock()
        self._sequence = itertools.count()
        self._sweep_at = self._FIRST_SWEEP

    def add(self, work):
        with self._lock:
            work._sequence = next(self._sequence)
            self._works.append(work)
            oldest = list(itertools.islice(self._works, 0, 2))
            everyone = list(self._works) if len(self._works) >= self._sweep_at else None
        # Finishing a Work copies its results: never under the registry's lock.
        self._drop_completed(oldest if everyone is None else everyone)
        if everyone is not None:  # sweeps stay rare while many Works really are pending
            with self._lock:
                self._sweep_at = max(self._FIRST_SWEEP, 2 * len(self._works))

    def _drop_completed(self, works):
        done = {id(w) for w in works if w.is_completed()}
        if done:
            with self._lock:
                self._works = collections.deque(w for w in self._works if id(w) not in done)

    def nothing_pending_in(self, key):
        """Whether no Work of `key`'s group may still be running, after finishing those of the
        oldest found complete (as an add would): a synchronous collective issued now is then next
        in c10d's order as soon as it is complete."""
        if not self._works:
            return True
        with self._lock:
            oldest = list(itertools.islice(self._works, 0, 2))
        self._drop_completed(oldest)
        with self._lock:
            return not any(w._ordered_in == key and not w._done for w in self._works)

    def issued_before(self, work):
        """The pending Works of `work`'s group issued before it, oldest first."""
        if work._ordered_in is None or work._sequence is None:
            return []
        with self._lock:
            return [w for w in self._works if w._sequence < work._sequence and w._ordered_in == work._ordered_in
                    and not w._done]


    def settle_all(self, seconds):
        """After this process's engine was replaced (shrink_group): every Work of the old engine
        has failed there already (its handles fail at the abort), so each is completed with its
        error now and leaves; a group of the new engine numbering its sets from 0 again must not
        find them pending ahead of its own Works. Bounded by `seconds` per Work (a settler thread
        may hold one's lock)."""
        with self._lock:
            works, self._works = list(self._works), collections.deque()
        for w in works:
            try:
                w._complete(seconds)
            except Exception:
                pass  # its error stays in its exception(), for whoever still holds it


_in_flight = _InFlight()


# How long a timed-out wait asks rank 0 who has not issued its collective: the error comes that
# much later at most (half a second for timeouts shorter than that, the timeout itself up to this).
_EXPLAIN_SECONDS = 2.0


def _wait_and_finish(parts, values, finish, deadline):
    """Waits for the parts whose results are not in `values` yet, in order, appending each, then
    turns them into the outputs: a TimeoutError leaves `values` as far as it got."""
    while len(values) < len(parts):
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        values.append(parts[len(values)].wait(remaining))
    finish(values)


def _failed(what, error):
    """torch's error for a collective the engine failed, with the ranks this rank lost as data
    (`lost_ranks`, global ranks, sorted; [] when nobody was lost, e.g. a mismatch or a timeout):
    what an application hands to shrink_group without parsing the text (lost_ranks.py)."""
    from hvd_herring.torch.distributed import lost_ranks
    return lost_ranks.attach(_as_dist_error(f"herring: {what} failed: {error}", error), _lost_ranks(error))


# How long a survivor's error may wait for its own transport to see the loss it was told about:
# rank 0's relayed abort ("rank 0 aborted the job: rank 2: connection closed") can arrive a few
# milliseconds before this rank reads rank 2's connection close itself.
_LOSS_SETTLES_SECONDS = 0.25


def _lost_ranks(error):
    from hvd_herring.engine_front import front
    lost = front.lost_ranks()
    if lost is None:
        return []  # no engine to ask (this rank's own was shut down)
    if lost or getattr(error, "code", None) not in ("PeerLost", "Aborted"):
        return lost
    deadline = time.monotonic() + _LOSS_SETTLES_SECONDS
    while not lost and time.monotonic() < deadline:
        time.sleep(0.005)
        lost = front.lost_ranks() or []
    return lost


def _as_dist_error(message, cause=None):
    error = dist.DistBackendError(message)
    error.__cause__ = cause
    return error


class CompletedWork(HerringWork):
    """A collective already complete when its Work is made: one that needed no communication (an
    empty list), or one completed before it returned (complete_at_once)."""

    # What HerringWork.__init__ would set for no parts, as class attributes: a small synchronous
    # collective makes one of these per call.
    _parts, _values, _keep_alive = (), None, ()
    _done, _exception, _future = True, None, None
    _default_timeout, _ordered_in, _sequence = None, None, None

    def __init__(self, result, what="collective", chain="torch"):
        dist.Work.__init__(self)
        self._result, self._what, self._chain = result, what, chain
        self._lock = threading.Lock()
        self._future_lock = threading.Lock()

    @staticmethod
    def _finish(values):
        pass

    def wait(self, timeout=None):
        return True


def complete_at_once(what, parts, finish, result, timeout, keep_alive, chain, ordered_in):
    """A synchronous collective (torch waits for its Work at once: dist.all_reduce without
    async_op) when no earlier Work of its group is pending (_in_flight.nothing_pending_in): waited
    and finished here, returned complete. The Work's machinery (locks, the in-flight registry,
    polling) was most of the Python in issuing a small dist.all_reduce. Errors are those its
    wait() would raise; one still pending when the wait ends (the timeout, an interrupt) becomes
    an ordinary Work in the registry, which keeps its tensors alive while the engine uses them."""
    deadline = None if timeout is None else time.monotonic() + timeout
    values = []
    try:
        _wait_and_finish(parts, values, finish, deadline)
    except TimeoutError:
        raise _still_pending(what, parts, finish, result, timeout, keep_alive, chain, ordered_in,
                             values)._timeout_error(timeout) from None
    except Exception as e:  # the engine's error (a lost rank, a mismatch): final, as in _complete
        raise _failed(what, e)
    except BaseException:
        _still_pending(what, parts, finish, result, timeout, keep_alive, chain, ordered_in, values)
        raise
    return CompletedWork(result, what, chain)


def _still_pending(what, parts, finish, result, timeout, keep_alive, chain, ordered_in, values):
    work = HerringWork(what, parts, finish, result, timeout, keep_alive, chain=chain, ordered_in=ordered_in)
    work._values = values
    return work


# --- settlers -------------------------------------------------------------------------------------

class _ThreadRole(threading.local):
    depth = 0   # 0 on the application's threads, d on settler d (a default: see naming._ThreadNaming)


_thread_role = _ThreadRole()


def _depth():
    return _thread_role.depth


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
                work._complete_in_order(work._default_timeout)
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
