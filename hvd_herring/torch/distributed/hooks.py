"""A DDP comm hook that averages on the engine.

With no hook, DDP divides every gradient by the world size itself (one more pass over all the
gradients) and then allreduces the sum. With this hook the engine averages while it writes the
result back (its postscale), so that pass disappears:

    ddp.register_comm_hook(None, hvd_herring.torch.distributed.average_hook)

Best with DistributedDataParallel(..., gradient_as_bucket_view=True), which also saves DDP's copy
of every gradient into its bucket and back."""

import torch.distributed as dist


def average_hook(process_group, bucket):
    """Allreduce-average of the bucket in place; `process_group` None means the default group."""
    work = dist.all_reduce(bucket.buffer(), op=dist.ReduceOp.AVG, group=process_group, async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])
