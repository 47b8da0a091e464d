"""DistributedGradientTape: a tf.GradientTape whose gradient() returns gradients averaged over
the ranks (Horovod's API, with groups=, compression, local sources)."""

import tensorflow as tf

from horovod.common.process_sets import global_process_set
from horovod.tensorflow.compression import Compression

from hvd_herring.tensorflow.gradient_reduction import cached_allreducer, groups_or_num_groups, variable_key
from hvd_herring.tensorflow.mpi_ops import Average


class _DistributedTapeMixin:
    """Placed in front of the wrapped tape's class, so super() is that class."""

    def __init__(self, tape, persistent, watch_accessed_variables, reducer, scale_local_gradients):
        super().__init__(persistent, watch_accessed_variables)
        self._tape = tape  # the recording of the wrapped tape (None when used as a context manager)
        self._allreduce_grads = reducer
        self.process_set = reducer.process_set
        self.scale_local_gradients = scale_local_gradients
        self._local_sources = set()

    def register_local_source(self, source):
        """Gradients of `source` stay local to this rank (not reduced)."""
        self._local_sources.add(variable_key(source))

    def gradient(self, target, sources, output_gradients=None, use_generic_names=False, **kwargs):
        gradients = super().gradient(target, sources, output_gradients, **kwargs)
        flat_sources = tf.nest.flatten(sources)
        flat_grads = tf.nest.flatten(gradients, expand_composites=False)
        reduced = self._allreduce_grads(flat_grads, flat_sources, local=self._local_sources,
                                        scale_local_gradients=self.scale_local_gradients,
                                        use_generic_names=use_generic_names)
        return tf.nest.pack_sequence_as(sources, reduced)

    def get_local_and_global_gradients(self, target, sources, output_gradients=None, use_generic_names=False):
        """([(source, local gradient)...], [(source, reduced gradient)...])."""
        gradients = self.gradient(target, sources, output_gradients=output_gradients,
                                  use_generic_names=use_generic_names)
        local, shared = [], []
        for s, g in zip(sources, gradients):
            (local if variable_key(s) in self._local_sources else shared).append((s, g))
        return local, shared


def DistributedGradientTape(gradtape, device_dense='', device_sparse='', compression=Compression.none,
                            sparse_as_dense=False, op=Average, gradient_predivide_factor=1.0, num_groups=0,
                            groups=None, process_set=global_process_set, scale_local_gradients=True):
    """A tape that wraps another tf.GradientTape and allreduces the gradients it computes.

    Args are Horovod's: `op` (Average or Sum), `gradient_predivide_factor` (with Average: scale
    by 1/f before the sum and f/size after), `groups` (N, or lists of variables reduced together),
    `compression` (Compression.fp16 halves the bytes sent), `sparse_as_dense`, `process_set`.
    """
    groups = groups_or_num_groups(groups, num_groups)
    reducer = cached_allreducer("DistributedGradientTape", device_dense, device_sparse, compression,
                                sparse_as_dense, op, gradient_predivide_factor, groups, process_set)
    cls = type(gradtape.__class__.__name__, (_DistributedTapeMixin, gradtape.__class__), {})
    return cls(gradtape._tape, gradtape._persistent, gradtape._watch_accessed_variables, reducer,
               scale_local_gradients)



def local_layer_list(local_layers, layer_class):
    """`local_layers` of the Partial* wrappers as a list: None, one layer, or layers (Horovod's
    check and message)."""
    if local_layers is None:
        return []
    if isinstance(local_layers, layer_class):
        return [local_layers]
    if not all(isinstance(layer, layer_class) for layer in local_layers):
        raise ValueError("All local layers must be of tf.keras.layers.Layer type.")
    return list(local_layers)

def PartialDistributedGradientTape(gradtape, device_dense='', device_sparse='', compression=Compression.none,
                                   sparse_as_dense=False, op=Average, gradient_predivide_factor=1.0,
                                   num_groups=0, groups=None, process_set=global_process_set, local_layers=None,
                                   scale_local_gradients=True):
    """DistributedGradientTape that keeps the gradients of `local_layers` (Keras layers of the
    Keras tf.keras is) local."""
    local_layers = local_layer_list(local_layers, tf.keras.layers.Layer)
    tape = DistributedGradientTape(gradtape, device_dense, device_sparse, compression, sparse_as_dense, op,
                                   gradient_predivide_factor, num_groups, groups, process_set,
                                   scale_local_gradients)
    for layer in local_layers:
        for var in layer.trainable_weights:
            tape.register_local_source(var)
    return tape
