"""Zero-copy memory for torch tensors (herring's own API, beside Horovod's).

A tensor allocated here lives in memory that the other ranks of its host map, so an allreduce of
it on one host reads every input where it is and writes every sum straight into every output: no
staging copies, the least memory traffic an allreduce can do (docs/zero_copy.md). Any tensor
still works with every collective; only where every local rank's tensors of a fused buffer are
here does the engine take this path (otherwise it stages them as usual).

    buf = hvd.zero_copy_empty(16 * 2**20)          # float32, zeroed
    buf.copy_(grads)                                # or compute into it
    hvd.allreduce_(buf)                             # in place, zero-copy
    out = hvd.allreduce(buf)                        # out-of-place: `out` is zero-copy memory too
    hvd.zero_copy_gradients(model.parameters())     # DistributedOptimizer's allreduces go zero-copy
"""

import torch
import torch.utils.dlpack

from hvd_herring.engine_front import front as _front
from hvd_herring.torch.dtypes import DTYPE_CODES
from hvd_herring.torch.storage_hold import storage_is_held

_used = False  # set by the first allocation: until then no tensor can be in zero-copy memory


def _dtype_code(dtype):
    code = DTYPE_CODES.get(dtype)
    if code is None:
        raise ValueError(f"zero-copy memory does not hold {dtype} tensors")
    return code


def zero_copy_empty(*size, dtype=torch.float32):
    """A zeroed CPU tensor of `size` in this process's zero-copy memory (whole pages: meant for
    buffers of at least a few hundred KiB). Freed when the tensor is."""
    global _used
    if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)):
        size = tuple(size[0])
    capsule = _front.zero_copy.empty([int(d) for d in size], _dtype_code(dtype))
    _used = True
    return torch.utils.dlpack.from_dlpack(capsule)


def zero_copy_like(tensor):
    """A copy of `tensor` (same shape and dtype, contiguous) in zero-copy memory."""
    out = zero_copy_empty(tuple(tensor.shape), dtype=tensor.dtype)
    out.copy_(tensor)
    return out


def zero_copy_gradients(parameters):
    """Gives every parameter that requires a gradient a `.grad` in zero-copy memory: one buffer per
    dtype, each gradient a view of it (zeroed, or holding the current gradient), as torch DDP's
    gradient_as_bucket_view does with its buckets. Backward accumulates into these views in place,
    so DistributedOptimizer's allreduces of them run zero-copy on one host. Zero the gradients in
    place between steps (model.zero_grad(set_to_none=False); torch's and Horovod's
    optimizer.zero_grad() set them to None): a gradient set to None comes back as ordinary memory,
    which still works but stages. Returns the buffers, by dtype."""
    params = [p for p in parameters if p.requires_grad]
    by_dtype = {}
    for p in params:
        if p.device.type != "cpu":
            raise ValueError(f"zero-copy memory holds CPU tensors; a parameter is on {p.device}")
        by_dtype.setdefault(p.dtype, []).append(p)
    buffers = {}
    for dtype, group in by_dtype.items():
        flat = zero_copy_empty(sum(p.numel() for p in group), dtype=dtype)
        offset = 0
        for p in group:
            view = flat[offset:offset + p.numel()].view_as(p)
            if p.grad is not None:
                view.copy_(p.grad)
            p.grad = view
            offset += p.numel()
        buffers[dtype] = flat
    return buffers


def in_use():
    """Whether any zero-copy memory was ever allocated in this process (else no tensor can be in it)."""
    return _used


def in_zero_copy_memory(tensor):
    """True when every byte of `tensor` lies in this process's zero-copy memory."""
    if not _used or tensor.device.type != "cpu":
        return False
    return _front.zero_copy.contains(tensor.data_ptr(), tensor.numel() * tensor.element_size())


def storage_in_zero_copy_memory(storage):
    """True when the whole of `storage` (a torch.UntypedStorage) lies in zero-copy memory."""
    if not _used or storage.device.type != "cpu":
        return False
    return _front.zero_copy.contains(storage.data_ptr(), storage.nbytes())


def move_to_zero_copy(tensor):
    """Moves the memory under `tensor`, its whole storage, into zero-copy memory in place: every
    tensor viewing that storage (say DDP's bucket views and, with gradient_as_bucket_view, the
    gradients) reads and writes the new memory from then on, and the old memory is freed. For
    buffers that someone else allocates and that are reduced step after step. As with torch's
    share_memory_(), the storage can no longer be resized afterwards. No-op for an empty storage
    or one already there; raises what zero_copy_empty raises (allocator off, pool full), and
    ValueError for a storage that a collective in flight still reads or writes."""
    if tensor.device.type != "cpu":
        raise ValueError(f"zero-copy memory holds CPU tensors; this one is on {tensor.device}")
    storage = tensor.untyped_storage()
    if storage.nbytes() == 0 or storage_in_zero_copy_memory(storage):
        return
    if storage_is_held(tensor):
        raise ValueError("cannot move a tensor into zero-copy memory while a collective in flight reads or "
                         "writes its storage (the result would land in the old memory): wait for it first")
    moved = zero_copy_empty(storage.nbytes(), dtype=torch.uint8)
    moved.copy_(torch.empty(0, dtype=torch.uint8).set_(storage))
    # Exchanges the memory (and its allocator) of the two storages: `storage` keeps its identity,
    # and with it every view; `moved` takes the old memory away and frees it.
    storage._swap_data_ptr_(moved.untyped_storage())


def empty_output_like(tensor):
    """The output of an out-of-place collective on `tensor`: zero-copy memory if `tensor` is."""
    if in_zero_copy_memory(tensor) and tensor.is_contiguous():
        return zero_copy_empty(tuple(tensor.shape), dtype=tensor.dtype)
    return torch.empty_like(tensor, memory_format=torch.contiguous_format)
