"""Horovod's TensorFlow collectives (the API of horovod.tensorflow.mpi_ops) on the herring engine:
the ops of op_library, with the gradients Horovod defines for them registered (op_gradients), and
the basics, process sets and helpers Horovod's mpi_ops offers beside them."""

import tensorflow as tf

from horovod.common.process_sets import (ProcessSet, _temp_process_set_object, add_process_set,  # noqa: F401
                                         global_process_set, remove_process_set)
from horovod.common.util import get_average_backwards_compatibility_fun, num_rank_is_power_2

from hvd_herring.basics import basics as _basics, export_basics as _export_basics
from hvd_herring.tensorflow import init, shutdown  # noqa: F401  (Horovod's mpi_ops offers them)
from hvd_herring.tensorflow import op_gradients  # noqa: F401  (registers the gradients)
from hvd_herring.tensorflow.op_library import (  # noqa: F401
    _LIB, _allreduce, _as_tensor, _grouped_allreduce, _grouped_reducescatter, _normalize_name, _reducescatter,
    allgather, alltoall, barrier, broadcast, broadcast_, grouped_allgather, join, local_rank_op, local_size_op,
    process_set_included_op, rank_op, size_op)

_export_basics(globals())

handle_average_backwards_compatibility = get_average_backwards_compatibility_fun(_basics)
check_num_rank_power_of_2 = num_rank_is_power_2


def _executing_eagerly():
    return tf.executing_eagerly()
