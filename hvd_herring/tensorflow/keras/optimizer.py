"""Horovod's Keras DistributedOptimizer, PartialDistributedOptimizer and load_model, written once
for both Keras flavours.

The distributed optimizer is an instance of a subclass of the wrapped optimizer's class, with the
same name and module, so a model saved with it loads without Horovod. The subclass puts the
flavour's mixin (keras2.DistributedOptimizerMixin or keras3.DistributedOptimizerMixin) in front of
the wrapped class: the mixin hooks the one place where that Keras sees gradients before applying
them (Keras 3: Optimizer.apply; Keras 2: compute_gradients, as Horovod does). What the mixins share
(the settings of an instance, local variables, the variables spelling) is DistributedOptimizerBase.
"""

from horovod.common.process_sets import global_process_set
from horovod.tensorflow.compression import Compression

from hvd_herring.tensorflow.gradient_reduction import GradientAllreducer, groups_or_num_groups, variable_key
from hvd_herring.tensorflow.gradient_tape import local_layer_list
from hvd_herring.tensorflow.keras_flavour import flavour
from hvd_herring.tensorflow.mpi_ops import Average, Sum


class Settings:
    """What a distributed optimizer instance does besides the wrapped optimizer's update."""

    def __init__(self, reducer, backward_passes_per_step=1, average_aggregated_gradients=False,
                 scale_local_gradients=True, sparse_as_dense=False):
        self.reducer = reducer
        self.backward_passes_per_step = backward_passes_per_step
        self.average_aggregated_gradients = average_aggregated_gradients
        self.scale_local_gradients = scale_local_gradients
        self.sparse_as_dense = sparse_as_dense
        self.local_vars = set()
        self.default = False  # made up for an optimizer built from a config (see _hvd_settings)
        # backward_passes_per_step > 1. Keras 3: rank-local sums built with the optimizer;
        # Keras 2: Horovod's aggregation helper (keras2.DistributedOptimizerMixin._hvd_configure).
        self.accumulators = []
        self.passes = None
        self.agg_helper = None

    def reduce(self, grads, variables):
        return self.reducer(grads, variables, local=self.local_vars, scale_local_gradients=self.scale_local_gradients)


class CallableList(list):
    """optimizer.variables is a list in Keras 3 and tf_keras, and was a method before: both
    spellings work."""

    def __call__(self):
        return self


class DistributedOptimizerBase:
    """What both flavours' mixins share. Methods that reach the wrapped optimizer live in the
    flavour's mixin (its super() is the wrapped class)."""

    _hvd = None  # a Settings; a default one when the optimizer was built from a config or loaded

    def _hvd_settings(self):
        if self._hvd is None:
            self._hvd = Settings(GradientAllreducer(f"Distributed{type(self).__name__}"))
            self._hvd.default = True
            self._hvd_configure()
        return self._hvd

    def _hvd_configure(self):
        """Called once the settings are attached (the Keras 2 mixin builds its helpers here)."""

    @property
    def process_set(self):
        return self._hvd_settings().reducer.process_set

    @property
    def scale_local_gradients(self):
        return self._hvd_settings().scale_local_gradients

    def register_local_var(self, var):
        """Gradients of `var` stay local to this rank (not reduced)."""
        self._hvd_settings().local_vars.add(variable_key(var))


_CLASSES = {}


def distributed_class_for(optimizer_class):
    """The distributed subclass of an optimizer class of the current Keras flavour."""
    cls = _CLASSES.get(optimizer_class)
    if cls is None:
        cls = type(optimizer_class.__name__, (flavour().DistributedOptimizerMixin, optimizer_class),
                   {"__module__": optimizer_class.__module__, "__qualname__": optimizer_class.__qualname__})
        _CLASSES[optimizer_class] = cls
    return cls


def attach(optimizer, settings):
    """Makes a distributed optimizer (of distributed_class_for's classes) use these settings."""
    optimizer._hvd = settings
    optimizer._hvd_configure()
    return optimizer


def DistributedOptimizer(optimizer, name=None, device_dense='', device_sparse='', compression=Compression.none,
                         sparse_as_dense=False, gradient_predivide_factor=1.0, op=Average,
                         backward_passes_per_step=1, average_aggregated_gradients=False, num_groups=0,
                         groups=None, process_set=global_process_set, scale_local_gradients=True):
    """An optimizer of the wrapped optimizer's class that averages (op=Average) or sums (op=Sum)
    gradients over the process set before applying them.

    Args are Horovod's: `compression` (Compression.fp16), `sparse_as_dense`,
    `gradient_predivide_factor`, `backward_passes_per_step` (accumulate N passes locally, then
    reduce once; `average_aggregated_gradients` divides the sum by N), `groups` (N, or lists of
    variables reduced together as one collective), `process_set`, `scale_local_gradients`.
    `name` prefixes the collectives' names. Returns a new optimizer built from the given one's
    config (its state is not copied), as Horovod does.
    """
    impl = flavour()
    impl.check_optimizer(optimizer)
    if isinstance(optimizer, DistributedOptimizerBase):
        raise ValueError("this optimizer is already a DistributedOptimizer")
    if op not in (Average, Sum):
        raise ValueError('op currently only supports Average and Sum')
    if backward_passes_per_step < 1:
        raise ValueError("backward_passes_per_step must be >= 1")
    groups = groups_or_num_groups(groups, num_groups)
    base = type(optimizer)
    reducer = GradientAllreducer(name or f"Distributed{base.__name__}", device_dense, device_sparse, compression,
                                 sparse_as_dense, op, gradient_predivide_factor, groups, process_set)
    distributed = distributed_class_for(base).from_config(optimizer.get_config())
    return attach(distributed, Settings(reducer, backward_passes_per_step, average_aggregated_gradients,
                                        scale_local_gradients, sparse_as_dense))


def PartialDistributedOptimizer(optimizer, name=None, device_dense='', device_sparse='', compression=Compression.none,
                                sparse_as_dense=False, gradient_predivide_factor=1.0, op=Average, groups=None,
                                process_set=global_process_set, local_layers=None, scale_local_gradients=True):
    """DistributedOptimizer whose gradients of `local_layers` (Keras layers) are not reduced:
    each rank applies its own (divided by the set's size when scale_local_gradients)."""
    local_layers = local_layer_list(local_layers, flavour().keras.layers.Layer)
    distributed = DistributedOptimizer(optimizer, name=name, device_dense=device_dense, device_sparse=device_sparse,
                                       compression=compression, sparse_as_dense=sparse_as_dense,
                                       gradient_predivide_factor=gradient_predivide_factor, op=op, groups=groups,
                                       process_set=process_set, scale_local_gradients=scale_local_gradients)
    for layer in local_layers:
        for var in layer.trainable_weights:
            distributed.register_local_var(var)
    return distributed


def load_model(filepath, custom_optimizers=None, custom_objects=None, compression=Compression.none,
               legacy_opts=False):
    """Loads a saved Keras model whose optimizer becomes a DistributedOptimizer (with
    `compression`), keeping the optimizer's saved state. Every optimizer of the flavour's
    keras.optimizers is recognised (its legacy ones with legacy_opts=True, Keras 2 only), and the
    classes in `custom_optimizers`; `custom_objects` is passed on to Keras."""
    impl = flavour()
    objects = {}
    for cls in impl.optimizer_classes(legacy_opts):
        if not cls.__name__.startswith("_"):
            # Keras 2 looks built-in optimizers up by their lower-case name.
            objects[cls.__name__] = objects[cls.__name__.lower()] = distributed_class_for(cls)
    for cls in custom_optimizers or []:
        objects[cls.__name__] = distributed_class_for(cls)
    objects.update(custom_objects or {})
    model = impl.keras.models.load_model(filepath, custom_objects=objects)
    optimizer = getattr(model, "optimizer", None)
    if isinstance(optimizer, DistributedOptimizerBase) and (optimizer._hvd is None or optimizer._hvd.default):
        # (Keras may have looked at the optimizer while loading, which makes default settings.)
        attach(optimizer, Settings(GradientAllreducer(f"Distributed{type(optimizer).__name__}",
                                                      compression=compression)))
    return model
