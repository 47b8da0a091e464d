"""What a user can do to the memory of a tensor whose request is in flight, and the check that the
engine kept writing the old memory, not memory reused meanwhile: shared by the Horovod-API and
torch.distributed workers (their checks named a_tensor_in_flight_keeps_its_memory)."""

import time

import torch

ELEMENTS = 1 << 16  # 256 KiB of float32: heap memory, reused by the next allocations of its size

# The tensors that _swap_into_another gave the memory in flight, for misused_in_flight to reduce
# again once the request completed.
SWAPPED = []


def _swap_into_another(t, value):
    # Another storage takes the memory in flight, and t takes that storage's (filled with `value`,
    # t's value before its request).
    # The request's result lands in the memory the other tensor now has; a second request on that
    # tensor held the memory again and freed it twice once done (SIGSEGV).
    other = torch.full_like(t, value)
    t.untyped_storage()._swap_data_ptr_(other.untyped_storage())
    SWAPPED.append(other)


# (what, misuse(tensor, its value before the request)): each freed or replaced its memory under the
# engine before the storage holds (native/torch/storage_hold.h).
MISUSES = (("t.resize_", lambda t, value: t.resize_(2 * ELEMENTS)),
           ("t.untyped_storage().resize_(0)", lambda t, value: t.untyped_storage().resize_(0)),
           ("t.set_", lambda t, value: t.set_(torch.zeros(3))),
           ("t.share_memory_", lambda t, value: t.share_memory_()),
           ("t.untyped_storage()._swap_data_ptr_", _swap_into_another))


def misused_in_flight(rank, world, issue, misuse, what):
    """Makes this rank's tensor, issues its request (issue(t) -> wait()), misuses the tensor while
    the request is in flight on rank 0 (the other ranks come 0.2 s later), then waits. Raises
    AssertionError if tensors allocated meanwhile were written, or the tensor's new memory was, or
    a tensor the memory in flight was swapped into lacks the sum or fails a second request."""
    if rank != 0:
        time.sleep(0.2)  # rank 0's request waits for the others meanwhile
    value = float(rank + 1)
    t = torch.full((ELEMENTS,), value)
    wait = issue(t)
    misuse(t, value)
    bystanders = [torch.zeros(ELEMENTS) for _ in range(4)]  # where freed memory would be reused
    wait()
    for b in bystanders:
        assert torch.count_nonzero(b) == 0, f"rank {rank}: {what}: a tensor allocated meanwhile was written"
    total = world * (world + 1) / 2
    if t.untyped_storage().nbytes() >= 4 * ELEMENTS and t.numel() >= ELEMENTS:
        # Rank 0's misuse came while its request waited for the others. Another rank's request may
        # have been writing its sum into the old memory while its misuse copied that memory into
        # the new (resize_, share_memory_): each element then holds the value or the sum.
        head = t[:ELEMENTS]
        kept = head == value if rank == 0 else (head == value) | (head == total)
        assert torch.all(kept), (f"rank {rank}: {what}: the tensor's new memory was written: "
                                 f"values {torch.unique(head)[:6].tolist()}")
    while SWAPPED:
        other = SWAPPED.pop()
        assert torch.all(other == total), f"rank {rank}: {what}: the sum did not land in the memory in flight"
        issue(other)()
        assert torch.all(other == world * total), f"rank {rank}: {what}: a second request on the memory swapped into another tensor gave a wrong sum"
