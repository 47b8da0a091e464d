"""What KerasEstimator (keras3_estimator) and its trainer (keras3_trainer) both read or set on a Keras 3
model: its input and output shapes, its output names, and its learning rate scaled by the number
of ranks."""


def model_shapes(model):
    """Each input's and output's shape with -1 for unknown dimensions (the batch)."""
    def shapes(tensors):
        return [[dim if dim else -1 for dim in tuple(t.shape)] for t in tensors]
    return shapes(model.inputs), shapes(model.outputs)


def output_names(model):
    """The model's output names as a plain list (Keras 3's Sequential has no output_names: its one
    output is its last layer's)."""
    names = getattr(model, "output_names", None)
    return [str(name) for name in (names if names is not None else [model.layers[-1].name])]


def scale_learning_rate(optimizer, factor):
    """Horovod scales the learning rate by the number of ranks for training (and back on the
    driver); a LearningRateSchedule is left as the user wrote it. Returns the new rate, or None."""
    import keras
    from hvd_herring.tensorflow.keras.keras3 import learning_rate
    if isinstance(optimizer.learning_rate, keras.optimizers.schedules.LearningRateSchedule):
        return None
    optimizer.learning_rate = lr = learning_rate(optimizer) * factor
    return lr
