"""What a user can do to the memory of a tensor whose request is in flight, and the check that the
engine kept writing the old memory, not memory reused meanwhile: shared by the Horovod-API and
torch.distributed workers (their checks named a_tensor_in_flight_keeps_its_memory)."""

import time

import torch

ELEMENTS = 1 << 16  # 256 KiB of float32: heap memory, reused by the next allocations of its size

# (what, misuse of the tensor): each freed or replaced its memory under the engine before the
# storage holds (native/torch/storage_hold.h).
MISUSES = (("t.resize_", lambda t: t.resize_(2 * ELEMENTS)),
           ("t.untyped_storage().resize_(0)", lambda t: t.untyped_storage().resize_(0)),
           ("t.set_", lambda t: t.set_(torch.zeros(3))),
           ("t.share_memory_", lambda t: t.share_memory_()))


def misused_in_flight(rank, issue, misuse, what):
    """Makes this rank's tensor, issues its request (issue(t) -> wait()), misuses the tensor while
    the request is in flight on rank 0 (the other ranks come 0.2 s later), then waits. Raises
    AssertionError if tensors allocated meanwhile were written, or the tensor's new memory was."""
    if rank != 0:
        time.sleep(0.2)  # rank 0's request waits for the others meanwhile
    t = torch.full((ELEMENTS,), float(rank + 1))
    wait = issue(t)
    misuse(t)
    bystanders = [torch.zeros(ELEMENTS) for _ in range(4)]  # where freed memory would be reused
    wait()
    for b in bystanders:
        assert torch.count_nonzero(b) == 0, f"rank {rank}: {what}: a tensor allocated meanwhile was written"
    if t.untyped_storage().nbytes() >= 4 * ELEMENTS and t.numel() >= ELEMENTS:
        assert torch.all(t[:ELEMENTS] == rank + 1), f"rank {rank}: {what}: the tensor's new memory was written"
