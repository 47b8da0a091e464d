"""Names of the engine's collectives, the same on every rank whatever the threads' timing.

The engine pairs the ranks' collectives by name. The application's threads (the main thread,
and the autograd thread during backward while the main thread waits in it) issue collectives in
program order, named by what they are (operation, dtype, shapes, reduce op, root): the engine
matches the n-th collective of a name with every rank's n-th (in program order), and since a
training step issues the same collectives every step, their names repeat and hit the response
cache (one bit per collective instead of a coordinator round). Callbacks of futures (DDP comm hooks:
PowerSGD issues collectives inside them) run wherever the future's result is set, or inline when
a callback is chained to a future already set: which thread that is, and when, differs between
ranks. So a callback's collectives are named after the chain it belongs to instead (the root
collective's name, the position of each `then` along it, a counter inside the callback), through
HerringFuture, whose `then` opens that naming scope around the callback."""

import itertools
import threading

from torch.futures import Future


class _ThreadNaming(threading.local):
    """Per thread: `scope`, the naming scope of the callback running on it (None outside
    callbacks); `last`, the chain id collective_name() last gave. Defaults as class attributes:
    getattr(a_local, name, default) on an attribute a thread never set raises and catches an
    AttributeError inside, 1.2 us, about a twentieth of a small dist.all_reduce."""
    scope = None
    last = "torch"


_local = _ThreadNaming()
_counters = {}                  # process set -> counter of the collectives its application threads issued
_counters_lock = threading.Lock()


class _Scope:
    def __init__(self, prefix):
        self.prefix, self.count = prefix, 0

    def next_name(self):
        n, self.count = self.count, self.count + 1
        return f"{self.prefix}/{n}"


def collective_name(process_set, signature):
    """The name of the next collective issued on this thread, `signature` saying what it is. Also
    gives it a chain id, unique in the job, for last_chain(): a future's callbacks name their
    collectives after it, so two collectives of one name never share a chain."""
    scope = _local.scope
    if scope is not None:
        name = chain = scope.next_name()
    else:
        counter = _counters.get(process_set)
        if counter is None:
            with _counters_lock:
                counter = _counters.setdefault(process_set, itertools.count())
        # next() on an itertools.count is atomic under the GIL: no lock per collective.
        name, chain = f"torch.{signature}", f"torch.{next(counter)}"
    _local.last = chain
    return name


def last_chain():
    """The chain id collective_name() last gave on this thread (the chain a Work's future roots)."""
    return _local.last


def raising_when_read_by_cpp(error):
    """`error`, made to raise itself when C++ code reads it as a future's value. A Python future
    set with an exception holds it as its value (torch.futures.Future.set_exception), and DDP's
    reducer looks for the bucket's tensors in that value by pickling it
    (torch._jit_internal._extract_tensors); finding none, it indexes an empty list (SIGSEGV in
    torch 2.13's Reducer::finalize_backward when a peer dies mid-backward). Pickling `error` raises
    it instead, so backward() raises the collective's error."""
    def raise_error(protocol=None):
        raise error
    error.__reduce_ex__ = raise_error  # pickle looks it up on the object, so the instance's wins
    return error


class HerringFuture(Future):
    """torch's Future, whose callbacks name their collectives after the chain (see above), and
    whose `then` returns a HerringFuture, so that the chain's later callbacks do too."""

    def __init__(self, chain):
        super().__init__()
        self._chain = chain
        self._thens = 0
        self._thens_lock = threading.Lock()

    def then(self, callback):
        with self._thens_lock:
            position, self._thens = self._thens, self._thens + 1
        child = HerringFuture(f"{self._chain}.{position}")

        def run(_):
            outer = _local.scope
            _local.scope = _Scope(child._chain)
            try:
                value = callback(self)
            except Exception as e:  # noqa: BLE001  (the child carries the callback's error, as torch's then does)
                child.set_exception(raising_when_read_by_cpp(e))
                return
            finally:
                _local.scope = outer
            child.set_result(value)

        super().add_done_callback(run)
        return child

    def add_done_callback(self, callback):
        self.then(callback)
