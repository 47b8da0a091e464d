"""Horovod's PyTorch API on the herring engine.

This package *is* `horovod.torch` when HOROVOD_BACKEND=herring (see hvd_herring.switch), and is
also importable directly as `hvd_herring.torch`. Horovod's own pure-Python layers
(DistributedOptimizer, broadcast_parameters, elastic state, SyncBatchNorm...) are loaded from the
installed Horovod and run unchanged on top of hvd_herring.torch.mpi_ops, which takes the place of
Horovod's compiled library.

Horovod is optional (the `horovod` extra): without it this package holds only what needs no
Horovod (torch.distributed's "herring" backend, torchft's process group, zero-copy memory), and
the Horovod API's names raise an ImportError that says what to install."""

import importlib
import importlib.util
import os
import sys

try:
    import horovod
except ImportError as error:
    _HOROVOD_MISSING = error
else:
    _HOROVOD_MISSING = None

# herring's own, with or without Horovod: zero-copy memory.
from hvd_herring.torch.zero_copy import (  # noqa: E402,F401
    zero_copy_empty, zero_copy_like, zero_copy_gradients, in_zero_copy_memory, move_to_zero_copy)

if _HOROVOD_MISSING is None:
    # Horovod's pure-Python torch modules are found through this package's path, under their usual
    # names (horovod.torch.optimizer...), while mpi_ops resolves to ours first.
    _HOROVOD_TORCH_DIR = os.path.join(os.path.dirname(horovod.__file__), "torch")
    __path__.append(_HOROVOD_TORCH_DIR)
    sys.modules["horovod.torch"] = sys.modules[__name__]
    horovod.torch = sys.modules[__name__]

    from hvd_herring.torch import mpi_ops  # noqa: E402

    sys.modules["horovod.torch.mpi_ops"] = mpi_ops

    from horovod.torch import elastic  # noqa: E402,F401
    from horovod.torch.compression import Compression  # noqa: E402,F401
    from horovod.torch.functions import (  # noqa: E402,F401
        allgather_object, broadcast_object, broadcast_optimizer_state, broadcast_parameters)
    from hvd_herring.torch.mpi_ops import (  # noqa: E402,F401
        allreduce, allreduce_async, allreduce_, allreduce_async_,
        grouped_allreduce, grouped_allreduce_async, grouped_allreduce_, grouped_allreduce_async_,
        sparse_allreduce_async,
        allgather, allgather_async, grouped_allgather, grouped_allgather_async,
        broadcast, broadcast_async, broadcast_, broadcast_async_,
        alltoall, alltoall_async,
        reducescatter, reducescatter_async, grouped_reducescatter, grouped_reducescatter_async,
        join, barrier, poll, synchronize,
        init, shutdown, is_initialized, start_timeline, stop_timeline,
        size, local_size, cross_size, rank, local_rank, cross_rank,
        mpi_threads_supported, mpi_enabled, mpi_built, gloo_enabled, gloo_built,
        nccl_built, ddl_built, ccl_built, cuda_built, rocm_built,
        ProcessSet, global_process_set, add_process_set, remove_process_set,
        Average, Sum, Adasum, Min, Max, Product,
        HorovodInternalError)
    from horovod.torch.optimizer import DistributedOptimizer  # noqa: E402,F401
    from hvd_herring.torch.batch_tuner import BatchSizeTuner  # noqa: E402,F401  (herring's own: R2SP)
    from hvd_herring.torch.r2sp import R2SPTrainer  # noqa: E402,F401  (herring's own: R2SP training mode)
    from hvd_herring.torch.sync_batch_norm import SyncBatchNorm  # noqa: E402,F401  (Horovod's, on CPU too)


def _check_has_gpu():
    return False


def __getattr__(name):
    """Without Horovod: a submodule still imports (hvd_herring.torch.distributed needs none of
    Horovod); a name of Horovod's API says what is missing."""
    if _HOROVOD_MISSING is None or name.startswith("__"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f"{__name__}.{name}")
    raise ImportError(
        f"hvd_herring.torch.{name} is part of Horovod's API, which needs Horovod 0.28.1: "
        "pip install 'hvd-herring[horovod]' (torch.distributed's \"herring\" backend needs no Horovod: "
        "import hvd_herring.torch.distributed)") from _HOROVOD_MISSING
