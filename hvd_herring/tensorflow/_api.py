"""Everything horovod.tensorflow offers that needs TensorFlow; hvd_herring.tensorflow loads it on
first use (see its docstring)."""

from horovod.tensorflow.compression import Compression  # noqa: F401
from hvd_herring.tensorflow.functions import (allgather_object, broadcast_object, broadcast_object_fn,  # noqa: F401
                                          broadcast_variables)
from horovod.tensorflow.util import _cache, _executing_eagerly, _make_subgraph, refs_to_vars, vars_to_refs  # noqa: F401

from hvd_herring.tensorflow import elastic  # noqa: F401
from hvd_herring.tensorflow.collectives import (allreduce, grouped_allreduce, grouped_reducescatter,  # noqa: F401
                                                reducescatter)
from hvd_herring.tensorflow.gradient_reduction import GradientAllreducer
from hvd_herring.tensorflow.gradient_tape import DistributedGradientTape, PartialDistributedGradientTape  # noqa: F401
from hvd_herring.tensorflow.legacy import (BroadcastGlobalVariablesHook, DistributedOptimizer,  # noqa: F401
                                           broadcast_global_variables)
from hvd_herring.tensorflow.mpi_ops import (  # noqa: F401
    _allreduce, _grouped_allreduce, _reducescatter, _grouped_reducescatter, _normalize_name,
    allgather, grouped_allgather, broadcast, broadcast_, alltoall, join, barrier,
    size_op, local_size_op, rank_op, local_rank_op, process_set_included_op,
    handle_average_backwards_compatibility, check_num_rank_power_of_2)
from hvd_herring.tensorflow.sync_batch_norm import SyncBatchNormalization  # noqa: F401


def _make_allreduce_grads_fn(name, device_dense, device_sparse, compression, sparse_as_dense, op,
                             gradient_predivide_factor, groups, process_set):
    """Horovod's internal factory (used by code written against Horovod's Keras layer)."""
    return GradientAllreducer(name, device_dense, device_sparse, compression, sparse_as_dense, op,
                              gradient_predivide_factor, groups, process_set)
