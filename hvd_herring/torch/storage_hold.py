"""Holds on the storages whose memory a request in flight reads or writes.

A reference to a tensor does not pin its memory: t.set_(), t.resize_() or
t.untyped_storage().resize_(0) free the memory of a tensor that is still referenced, and the
engine (and, on one host, the other ranks' cross-memory writes) would write it afterwards.
native/torch/storage_hold.h has the hold: the storages are kept and their memory's release
deferred until the last request on them completes. A hold is made before the
request's addresses are read, and dropped with the request's tensors when its result is taken.
"""

import importlib.util
import warnings

import torch

from hvd_herring import build_info

_built_against = build_info.mismatch("torch", torch.__version__)
if _built_against is not None:
    # Another torch's C++ ABI could crash the process inside the module: the Python path instead.
    warnings.warn(
        f"hvd_herring: its C++ torch calls (hvd_herring._torch_native) were built against torch "
        f"{_built_against}, but this process runs torch {torch.__version__}; they are not loaded, and "
        f"tensors are read in Python instead (correct, slower for small tensors). Install "
        f"torch=={_built_against.split('+')[0]}, or build hvd_herring from source against this torch.",
        RuntimeWarning, stacklevel=2)
    _torch_native = None
else:
    try:
        from hvd_herring import _torch_native
    except ImportError:
        if importlib.util.find_spec("hvd_herring._torch_native") is not None:
            raise  # built but not loadable: a broken installation, not one without the module
        _torch_native = None  # built without torch's headers (HERRING_TORCH=OFF)

if _torch_native is not None:
    hold_storages = _torch_native.hold_storages
    storage_is_held = _torch_native.storage_is_held
else:
    import threading

    import torch

    _holds_lock = threading.Lock()
    _holds = {}  # storage address -> holds: what storage_is_held answers

    class _PythonHold:
        """Without the C++ module, Python can keep the storages alive (t.set_() and a dropped
        tensor are then safe) but cannot defer the release of memory that a resize_() replaces."""

        def __init__(self, tensors):
            # Keyed by the address at hold time: a resize_() meanwhile moves the storage's memory.
            self._storages = {s.data_ptr(): s for s in _storages_in(tensors)}
            with _holds_lock:
                for address in self._storages:
                    _holds[address] = _holds.get(address, 0) + 1

        def __del__(self):
            with _holds_lock:
                for address in self._storages:
                    left = _holds.pop(address, 1) - 1
                    if left:
                        _holds[address] = left

    def hold_storages(tensors):
        return _PythonHold(tensors)

    def _storages_in(tensors):
        if isinstance(tensors, torch.Tensor):
            yield tensors.untyped_storage()
        elif isinstance(tensors, (list, tuple)):
            for t in tensors:
                yield from _storages_in(t)

    def storage_is_held(tensor):
        with _holds_lock:
            return tensor.untyped_storage().data_ptr() in _holds


def held(tensors):
    """`tensors` (a tensor, None, or nested lists and tuples of them) with a hold on their storages:
    what a request keeps alive until its result is taken."""
    return tensors, hold_storages(tensors)
