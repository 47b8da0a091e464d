"""One interface over the three APIs the stacks are driven through, so that every workload runs
the same code on every stack:

    horovod : Horovod's torch API (herring when HOROVOD_BACKEND=herring, else stock Horovod-gloo)
    torch   : torch.distributed with the gloo backend; models go through DistributedDataParallel
    mpi     : MPI_Allreduce / MPI_Iallreduce through mpi4py (Open MPI)
    deepspeed : DeepSpeed's shared-memory CPU allreduce (deepspeed.comm.inference_all_reduce on its
              deepspeed_shm_comm op) over a gloo process group; allreduce workloads only

Each Comm offers: rank, size, barrier(), max_of(value), allreduce_(buffer) (sum in place),
allreduce_many_(tensors) (submit all asynchronously, then wait for all), distribute(model,
optimizer) (wrap a model the way a user of that stack would for data-parallel training),
sync_batch_norm(num_features) (the stack's synchronized batch norm; not on mpi) and counters()
(engine counters, herring only).

barrier() and max_of() frame every timed region, so max_of runs on a buffer allocated once, reduced
in place, read and written through a numpy view: the same few microseconds of Python on every stack
(Horovod's barrier is such an allreduce too; the others call their stack's barrier). With more
ranks than cores a rank's timed region also holds what its core's other rank runs before that
rank's next wait, which is the max_of of the iteration: measured at np=4 on 2 cores, 4 KiB, a
max_of that made a new tensor and reduced it out of place (torch.tensor, hvd.allreduce) kept
herring's slowest rank 42 us from its result after the first had its own, against 14 us for
mpi4py's pickled float, and herring measured 66-75 us against 37 for mpi; with the max_of below, 37
against 31.5."""

import datetime
import os

TIMEOUT_SECONDS = int(os.environ.get("HERRING_BENCH_COLLECTIVE_TIMEOUT", "600"))


def _max_cell(torch):
    """max_of's buffer: a one-element float64 tensor and the numpy view it is read and written by."""
    buf = torch.zeros(1, dtype=torch.float64)
    return buf, buf.numpy()


class Distributed:
    """A model and optimizer wrapped for data-parallel training: forward(x), backward, step()."""

    def __init__(self, forward, step):
        self.forward, self.step = forward, step


class HorovodComm:
    api = "horovod"

    def __init__(self):
        import torch
        import horovod.torch as hvd
        self.torch, self.hvd = torch, hvd
        hvd.init()
        self.rank, self.size = hvd.rank(), hvd.size()
        self.backend = "herring" if os.environ.get("HOROVOD_BACKEND") == "herring" else "horovod"
        self._barrier_buf = torch.zeros(1)
        self._max_buf, self._max_view = _max_cell(torch)
        self._zero_copy = os.environ.get("HERRING_BENCH_ZERO_COPY") == "1"

    def barrier(self):
        # An allreduce rather than hvd.barrier(): the same negotiated path on both backends.
        self.hvd.allreduce_(self._barrier_buf, op=self.hvd.Sum, name="bench.barrier")

    def max_of(self, value):
        self._max_view[0] = value
        self.hvd.allreduce_(self._max_buf, op=self.hvd.Max, name="bench.max")
        return float(self._max_view[0])

    def make(self, n):
        if self._zero_copy:  # herring's zero-copy memory (the herring-zero-copy stack)
            return self.hvd.zero_copy_empty(n, dtype=self.torch.float32)
        return self.torch.empty(n, dtype=self.torch.float32)

    def allreduce_(self, buf):
        self.hvd.allreduce_(buf, op=self.hvd.Sum, name=f"bench.allreduce.{buf.numel()}")

    def allreduce_many_(self, tensors):
        handles = [self.hvd.allreduce_async_(t, op=self.hvd.Sum, name=f"bench.tiny.{i}")
                   for i, t in enumerate(tensors)]
        for h in handles:
            self.hvd.synchronize(h)

    def distribute(self, model, optimizer):
        # What a Horovod user writes: DistributedOptimizer registers one hook per parameter that
        # starts an asynchronous allreduce (Average) as soon as its gradient is accumulated;
        # step() synchronizes all of them before updating.
        if self._zero_copy:  # gradients as views of zero-copy buffers (zeroed in place between steps)
            self.hvd.zero_copy_gradients(model.parameters())
        opt = self.hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
        return Distributed(model, opt.step)

    def sync_batch_norm(self, num_features):
        # hvd.SyncBatchNorm: on herring it trains on CPU tensors; Horovod's own needs a GPU.
        return self.hvd.SyncBatchNorm(num_features)

    def counters(self):
        if self.backend != "herring":
            return None
        import hvd_herring
        return dict(hvd_herring.counters())


class _TorchProcessGroupFraming:
    """barrier(), max_of() and make() of the stacks that run over a torch.distributed process group
    (self.torch, self.tdist = torch.distributed, self._max_buf/_max_view from _max_cell)."""

    def barrier(self):
        self.tdist.barrier()

    def max_of(self, value):
        self._max_view[0] = value
        self.tdist.all_reduce(self._max_buf, op=self.tdist.ReduceOp.MAX)
        return float(self._max_view[0])

    def make(self, n):
        return self.torch.empty(n, dtype=self.torch.float32)


class TorchComm(_TorchProcessGroupFraming):
    api = "torch"

    def __init__(self):
        import torch
        import torch.distributed as dist
        self.torch, self.dist = torch, dist
        self.tdist = dist  # the framing's process group is the measured one
        # The ddp-herring stack: the same torch.distributed code on backend "herring".
        backend = os.environ.get("HERRING_BENCH_TORCH_BACKEND", "gloo")
        if backend == "herring":
            import hvd_herring.torch.distributed  # noqa: F401  (registers the backend)
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=TIMEOUT_SECONDS))
        self.rank, self.size = dist.get_rank(), dist.get_world_size()
        self.backend = "torch-" + backend
        self._max_buf, self._max_view = _max_cell(torch)

    def allreduce_(self, buf):
        self.dist.all_reduce(buf)

    def allreduce_many_(self, tensors):
        works = [self.dist.all_reduce(t, async_op=True) for t in tensors]
        for w in works:
            w.wait()

    def distribute(self, model, optimizer):
        # torch's own DistributedDataParallel with its defaults: gradients packed into ~25 MiB
        # buckets (bucket_cap_mb=25, the first 1 MiB) in reverse parameter order, each bucket
        # allreduced asynchronously as soon as it is full; backward returns when all are done.
        from torch.nn.parallel import DistributedDataParallel
        bucket_view = os.environ.get("HERRING_BENCH_DDP_BUCKET_VIEW") == "1"   # the bucket-view variant
        ddp = DistributedDataParallel(model, gradient_as_bucket_view=bucket_view)
        if os.environ.get("HERRING_BENCH_DDP_AVERAGE_HOOK") == "1":  # the bucket-view-average-hook variant
            import hvd_herring.torch.distributed as herring_dist
            ddp.register_comm_hook(None, herring_dist.average_hook)
        return Distributed(ddp, optimizer.step)

    def sync_batch_norm(self, num_features):
        # nn.SyncBatchNorm's algorithm and collectives; torch's module itself refuses CPU tensors.
        import torch_sync_batch_norm
        return torch_sync_batch_norm.SyncBatchNorm(num_features)

    def counters(self):
        return None


class MpiComm:
    api = "mpi"

    def __init__(self):
        from mpi4py import MPI
        self.MPI = MPI
        self.comm = MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.backend = "mpi"
        import numpy as np
        self._max_view = np.zeros(1, dtype=np.float64)

    def barrier(self):
        self.comm.Barrier()

    def max_of(self, value):
        self._max_view[0] = value
        self.comm.Allreduce(self.MPI.IN_PLACE, self._max_view, op=self.MPI.MAX)
        return float(self._max_view[0])

    def make(self, n):
        import numpy as np
        return np.empty(n, dtype=np.float32)

    def allreduce_(self, buf):
        self.comm.Allreduce(self.MPI.IN_PLACE, _as_array(buf), op=self.MPI.SUM)

    def allreduce_many_(self, tensors):
        reqs = [self.comm.Iallreduce(self.MPI.IN_PLACE, _as_array(t), op=self.MPI.SUM) for t in tensors]
        self.MPI.Request.Waitall(reqs)

    def distribute(self, model, optimizer):
        # DistributedOptimizer's pattern written over MPI: a hook per parameter starts
        # MPI_Iallreduce on its gradient once accumulated; step() waits for all, averages, updates.
        pending = []

        def hook(p):
            pending.append(self.comm.Iallreduce(self.MPI.IN_PLACE, p.grad.numpy(), op=self.MPI.SUM))

        for p in model.parameters():
            p.register_post_accumulate_grad_hook(hook)

        def step():
            self.MPI.Request.Waitall(pending)
            pending.clear()
            for p in model.parameters():
                if p.grad is not None:
                    p.grad.div_(self.size)
            optimizer.step()

        return Distributed(model, step)

    def counters(self):
        return None


class DeepSpeedComm(_TorchProcessGroupFraming):
    """DeepSpeed's CPU allreduce as its users get it: deepspeed.comm.init_distributed() on the CPU
    accelerator (gloo, since oneccl_bindings_for_pytorch is not installed) builds or loads the
    deepspeed_shm_comm op and maps every local rank's shared-memory workspace; then
    deepspeed.comm.inference_all_reduce(t) reduces in place through that op (csrc/cpu/comm/shm.cpp:
    below 1 MiB every rank sums all inputs, above it each rank sums a slice, in 32 MiB chunks).
    The barrier and the timing max go through the same gloo group, outside the timed region."""
    api = "deepspeed"

    def __init__(self):
        import torch
        import torch.distributed as tdist
        import deepspeed.comm as dist
        import deepspeed.comm.comm as dist_state   # holds the live backend object (cdb)
        from deepspeed.accelerator import get_accelerator
        self.torch, self.tdist, self.dist = torch, tdist, dist
        accel = get_accelerator()
        if accel.device_name() != "cpu":
            raise RuntimeError(f"DeepSpeed chose the {accel.device_name()!r} accelerator, not 'cpu'")
        dist.init_distributed(dist_backend=accel.communication_backend_name(),
                              timeout=datetime.timedelta(seconds=TIMEOUT_SECONDS))
        self.rank, self.size = dist.get_rank(), dist.get_world_size()
        self.backend = "deepspeed-shm"
        self._max_buf, self._max_view = _max_cell(torch)
        # The op never unlinks its workspaces (shared_close is not called): 66 MiB per rank would
        # stay in /dev/shm after every launch. Once every rank has mapped every workspace (the
        # op's initialize waits until it could open each one, and the barrier follows it), each
        # rank unlinks its own name; the mappings stay valid, and nothing is left even on a kill.
        self.barrier()
        name = "/dev/shm/deepspeed_allreduce_buffer_{}_{}_{}_{}".format(
            os.getuid(), os.environ.get("MASTER_ADDR", ""), os.environ.get("MASTER_PORT", ""), self.rank)
        try:
            os.unlink(name)
            mapped = True
        except FileNotFoundError:
            mapped = False
        self._check_shm_op(dist_state.cdb, mapped, name)

    def _check_shm_op(self, cdb, mapped, name):
        """Refuses to measure anything but the shm op: inference_all_reduce silently falls back to
        the gloo all_reduce when the op did not build, the CPU lacks its vector ISA, or the ranks
        are not all local (LOCAL_SIZE != world size: then the op is never initialized)."""
        why = []
        if getattr(cdb, "shm_comm_op", None) is None:
            why.append("the deepspeed_shm_comm op was not built or loaded")
        elif getattr(cdb, "shm_vector_kernel_level", 0) < 1:
            why.append(f"vector_kernel_level() is {cdb.shm_vector_kernel_level} (fp32 needs 1: AVX2)")
        if not hasattr(self.torch.ops.deepspeed, "inference_all_reduce_"):
            why.append("torch.ops.deepspeed.inference_all_reduce_ is not registered")
        local = os.environ.get("LOCAL_SIZE")
        if local != str(self.size):
            why.append(f"LOCAL_SIZE is {local!r}, not the world size {self.size} (the op would not map "
                       "shared memory)")
        if not why and not mapped:
            why.append(f"its shared-memory workspace {name} does not exist")
        if why:
            raise RuntimeError(f"rank {self.rank}: DeepSpeed's shm allreduce is not in use: " + "; ".join(why))

    def allreduce_(self, buf):
        self.dist.inference_all_reduce(buf, op=self.dist.ReduceOp.SUM)

    def counters(self):
        return None


def _as_array(buf):
    return buf.numpy() if hasattr(buf, "numpy") else buf


def connect(api):
    return {"horovod": HorovodComm, "torch": TorchComm, "mpi": MpiComm, "deepspeed": DeepSpeedComm}[api]()
