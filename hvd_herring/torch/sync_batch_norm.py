"""hvd.SyncBatchNorm (also horovod.torch.sync_batch_norm.SyncBatchNorm): Horovod's module, which
trains on CPU tensors too.

Horovod's SyncBatchNorm refuses CPU input because torch's batch-norm primitives exist for GPUs
only; this one runs the same algorithm (batch_norm_cpu.SynchronizedBatchNorm) on plain tensor
operations, with the engine's collectives: a layer costs one small allgather forward and one
small allreduce backward. Named by the channel count, so that layers of one width share a
response-cache entry (one fixed name for layers of different widths would evict it at every
layer)."""

from hvd_herring.torch.batch_norm_cpu import SynchronizedBatchNorm
from hvd_herring.torch.mpi_ops import Sum, allgather, allreduce, size


class SyncBatchNorm(SynchronizedBatchNorm):
    """Batch norm whose training statistics are those of the global batch (every rank's samples).
    Same arguments as Horovod's hvd.SyncBatchNorm and torch's BatchNorm2d; any input of at least
    two dimensions (N, C, ...)."""

    def world_size(self):
        return size()

    def gather_statistics(self, packed):
        return allgather(packed.unsqueeze(0), name=f"sync_batch_norm.stats.{self.num_features}")

    def sum_over_ranks(self, packed):
        return allreduce(packed, op=Sum, name=f"sync_batch_norm.sums.{self.num_features}")


__all__ = ["SyncBatchNorm"]
