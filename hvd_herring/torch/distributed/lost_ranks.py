"""`err.lost_ranks` on the torch.distributed.DistBackendError a survivor reads: the global ranks
this rank lost (crashed, killed, aborted; not those that left in order), sorted, as data an
application hands to shrink_group without parsing the message. [] for a failure that lost nobody
(a mismatch), None for an error herring did not make.

The error herring raises (work._failed) does not reach the caller as that object: a collective
called through torch.distributed passes c10d's C++ dispatch, which re-raises a new DistBackendError
with the message only (measured on torch 2.13: dist.all_reduce's error had lost the attribute set
on herring's). So the ranks are remembered by message here, and DistBackendError gets a property
that reads them back: from the object itself when herring's own reaches the caller, else by its
message (torch may append a C++ trace to it: a remembered message it starts with counts too)."""

import collections
import threading

import torch.distributed as dist

_REMEMBERED = 64  # failures are rare; the newest few are what a survivor's handler reads
_by_message = collections.OrderedDict()
_lock = threading.Lock()
_ATTRIBUTE = "_herring_lost_ranks"


def attach(error, ranks):
    """Sets `error.lost_ranks` and remembers it for the copies torch makes of `error`."""
    ranks = list(ranks)
    error.__dict__[_ATTRIBUTE] = ranks
    with _lock:
        _by_message[str(error)] = ranks
        _by_message.move_to_end(str(error))
        while len(_by_message) > _REMEMBERED:
            _by_message.popitem(last=False)
    return error


def of(error):
    """The ranks `error` lost: herring's own error, torch's copy of it, or an error that quotes it
    (DDP's backward re-raises a collective's failure as a RuntimeError "Cannot extract tensors from
    value: DistBackendError: <herring's message>"). None for an error that does not come from one."""
    ranks = getattr(error, "__dict__", {}).get(_ATTRIBUTE)
    if ranks is not None:
        return list(ranks)
    text = str(error)
    with _lock:
        ranks = _by_message.get(text)
        if ranks is None:
            ranks = next((r for m, r in reversed(_by_message.items()) if m in text), None)
    return None if ranks is None else list(ranks)


def _set(error, ranks):
    error.__dict__[_ATTRIBUTE] = list(ranks)


def install():
    """Gives torch's DistBackendError the `lost_ranks` property (idempotent)."""
    if not isinstance(dist.DistBackendError.__dict__.get("lost_ranks"), property):
        dist.DistBackendError.lost_ranks = property(of, _set, doc=__doc__.split("\n\n")[0])
