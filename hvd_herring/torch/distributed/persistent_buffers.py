"""Moves the buffers that torch.distributed users allreduce step after step (DDP's buckets above
all) into zero-copy memory, so that the engine reduces them in place on one host.

DDP allocates its buckets itself, in C++, from the ordinary CPU allocator, and allreduces each one
every step; staged through the shared-memory arena, a bucket of S bytes costs each rank
(5 - 1/N)·S bytes of memory traffic, in zero-copy memory 2·S (docs/zero_copy.md). A storage seen
by a second allreduce while still alive is a persistent buffer: it is moved then, once, in place
(zero_copy.move_to_zero_copy), and every view of it (DDP's bucket views and, with
gradient_as_bucket_view, the gradients) follows. A buffer allocated afresh for each allreduce is
never moved: it is never seen twice. Nor is a storage that a pending collective still reads or
writes (moving frees its old memory): it moves at a later allreduce.

Only buffers that are a whole storage of at least the engine's zero-copy minimum are moved, only
when every rank of the job is on one host (the engine's zero-copy path is for one-host process
sets), and not at all with HERRING_DIST_ZERO_COPY=0. Like share_memory_(), a moved storage can no
longer be resized."""

import warnings
import weakref

from hvd_herring import _native
from hvd_herring.engine_front import front
from hvd_herring.torch import zero_copy
from hvd_herring.torch.storage_hold import storage_is_held


class PersistentBuffers:
    """Remembers (weakly) the storages allreduced once; moves one the second time it comes."""

    def __init__(self):
        self._seen = {}        # id(storage) -> weak reference to it
        self._enabled = None   # decided at the first allreduce, when the engine knows its hosts

    def _decide(self):
        if self._enabled is None:
            self._enabled = (_native.bool_knob("HERRING_DIST_ZERO_COPY")
                             and front.local_size() == front.size())
        return self._enabled

    def visit(self, tensor):
        """Called with every tensor about to be allreduced in place (contiguous, CPU)."""
        nbytes = tensor.numel() * tensor.element_size()
        if nbytes < _native.ZERO_COPY_MIN_BYTES or not self._decide():  # small ones first: the latency path
            return
        storage = tensor.untyped_storage()
        if storage.nbytes() != nbytes or zero_copy.storage_in_zero_copy_memory(storage):
            return
        key = id(storage)
        ref = self._seen.get(key)
        if ref is None or ref() is not storage:
            self._seen[key] = weakref.ref(storage, lambda _, key=key: self._seen.pop(key, None))
            return
        if storage_is_held(tensor):
            # An earlier collective on it is still running (two async all_reduces of one tensor):
            # moving it now would free the memory that collective reads and writes. Next time.
            return
        del self._seen[key]
        try:
            zero_copy.move_to_zero_copy(tensor)
        except Exception as e:  # the allocator off or full: stage from now on, as before
            self._enabled = False
            warnings.warn(f"herring: torch.distributed buffers stay in ordinary memory (staged): {e}")


persistent_buffers = PersistentBuffers()
