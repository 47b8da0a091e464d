"""Horovod's Keras callbacks, for Keras 2 and Keras 3: BroadcastGlobalVariablesCallback,
MetricAverageCallback, LearningRateScheduleCallback, LearningRateWarmupCallback and
BestModelCheckpoint.

Written once on the public Keras API both flavours share; the base class and the few calls that
differ come from the flavour module (keras2 or keras3, chosen by what tf.keras is). Horovod's own
implementations read and write the learning rate through Keras 2's backend session functions,
which Keras 3 does not have."""

import numpy as np
import tensorflow as tf

from hvd_herring.tensorflow.functions import broadcast_variables

from hvd_herring.tensorflow import mpi_ops
from hvd_herring.tensorflow.gradient_reduction import variable_key
from hvd_herring.tensorflow.keras_flavour import flavour, optimizer_variables

_flavour = flavour()


class BroadcastGlobalVariablesCallback(_flavour.Callback):
    """Makes every rank start from the root rank's weights: the model's variables are broadcast
    when training begins, and the optimizer's after the first batch (Keras creates them when
    the first step is traced). A model not built before fit() is broadcast after the first batch
    too, as Horovod does."""

    def __init__(self, root_rank, device='', local_variables=None):
        super().__init__()
        self.root_rank = root_rank
        self.device = device
        self._local_vars = set()
        if local_variables is None:
            local_variables = []
        elif not isinstance(local_variables, (list, tuple, set)):
            local_variables = [local_variables]
        for var in local_variables:
            self.register_local_var(var)
        self._model_done = False
        self.broadcast_done = False

    def register_local_var(self, var):
        """`var` keeps its own value on every rank (it is not broadcast)."""
        self._local_vars.add(variable_key(var))

    def _broadcast(self, variables):
        variables = [v for v in variables if variable_key(v) not in self._local_vars]
        if variables:
            with tf.device(self.device):
                broadcast_variables(variables, root_rank=self.root_rank)

    def on_train_begin(self, logs=None):
        if self.model.variables:
            self._broadcast(self.model.variables)
            self._model_done = True

    def on_train_batch_end(self, batch, logs=None):
        if self.broadcast_done:
            return
        if not self._model_done:
            self._broadcast(self.model.variables)
            self._model_done = True
        self._broadcast(optimizer_variables(self.model.optimizer))
        self.broadcast_done = True


class MetricAverageCallback(_flavour.Callback):
    """Replaces the epoch's metrics (in the logs every later callback, the History and the
    progress bar see) by their average over the ranks: one allreduce per epoch. Put it before
    callbacks that read metrics."""

    def __init__(self, device=''):
        super().__init__()
        self.device = device

    def _average_metrics_in_place(self, logs):
        if not logs:
            return
        names = sorted(k for k, v in logs.items() if np.ndim(v) == 0 and np.issubdtype(np.asarray(v).dtype, np.number))
        if not names:
            return
        values = tf.constant([float(logs[k]) for k in names], dtype=tf.float64)
        with tf.device(self.device):
            averaged = mpi_ops._allreduce(values, op=mpi_ops.Average, name="MetricAverageCallback")
        for name, value in zip(names, averaged.numpy().tolist()):
            logs[name] = value

    def on_epoch_end(self, epoch, logs=None):
        self._average_metrics_in_place(logs)


def _get_lr(optimizer):
    return _flavour.learning_rate(optimizer)


def _momentum_buffers(optimizer):
    """The momentum slots that hold lr-scaled updates (SGD: m = momentum*m - lr*g; RMSprop:
    m = momentum*m + lr*g/rms): rescaling them by new_lr/old_lr when the learning rate changes is
    Horovod's momentum correction (Goyal et al.), which Horovod applies to Keras 2 by scaling the
    momentum coefficient for one batch, the same update."""
    momentum = getattr(optimizer, "momentum", 0)
    if not (float(momentum) if isinstance(momentum, (int, float)) else float(tf.convert_to_tensor(momentum))):
        return []
    buffers = getattr(optimizer, "momentums", None) or getattr(optimizer, "_momentums", None)
    if buffers:
        return list(buffers)
    # tf.keras.optimizers.legacy: per-variable slots.
    slots = getattr(optimizer, "_slots", None) or {}
    return [per_var["momentum"] for per_var in slots.values() if "momentum" in per_var]


class LearningRateScheduleCallback(_flavour.Callback):
    """Sets the learning rate to initial_lr * multiplier(epoch) between start_epoch and end_epoch,
    once per epoch (staircase) or every batch with a fractional epoch. `multiplier` is a function
    of the epoch, or a number meaning multiplier ** (epoch - start_epoch)."""

    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 momentum_correction=True, steps_per_epoch=None):
        super().__init__()
        if initial_lr is None:
            raise ValueError('Parameter `initial_lr` is required')
        self.initial_lr = initial_lr
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.staircase = staircase
        self.momentum_correction = momentum_correction
        self.steps_per_epoch = steps_per_epoch
        self.current_epoch = None
        if not callable(multiplier):
            self.multiplier = lambda epoch: multiplier ** (epoch - start_epoch)
        else:
            self.multiplier = multiplier

    def _autodetect_steps_per_epoch(self):
        if self.params.get('steps'):
            return self.params['steps']
        if self.params.get('samples') and self.params.get('batch_size'):
            return self.params['samples'] // self.params['batch_size']
        raise ValueError('Could not autodetect the number of steps per epoch. Please specify the steps_per_epoch '
                         f'parameter to the {self.__class__.__name__}().')

    def _adjust_learning_rate(self, epoch):
        optimizer = self.model.optimizer
        old_lr = _get_lr(optimizer)
        new_lr = self.initial_lr * self.multiplier(epoch)
        optimizer.learning_rate = new_lr
        if self.momentum_correction and old_lr > 0 and new_lr != old_lr:
            ratio = new_lr / old_lr
            for m in _momentum_buffers(optimizer):
                m.assign(m * ratio)

    def on_train_begin(self, logs=None):
        if not self.staircase and not self.steps_per_epoch:
            self.steps_per_epoch = self._autodetect_steps_per_epoch()

    def on_epoch_begin(self, epoch, logs=None):
        self.current_epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        past_end = self.end_epoch is not None and self.current_epoch >= self.end_epoch
        if self.current_epoch < self.start_epoch or past_end:
            return
        if self.staircase and batch == 0:
            self._adjust_learning_rate(self.current_epoch)
        elif not self.staircase:
            self._adjust_learning_rate(self.current_epoch + float(batch) / self.steps_per_epoch)

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs['lr'] = _get_lr(self.model.optimizer)


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """Gradual warm-up (Goyal et al.): the learning rate grows from initial_lr / size to
    initial_lr over `warmup_epochs`, adjusted every batch."""

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True, steps_per_epoch=None, verbose=0):
        def multiplier(epoch):
            # Shifted by one batch so that the end of each epoch is a round number.
            epoch += 1. / self.steps_per_epoch
            return 1. / mpi_ops.size() * (epoch * (mpi_ops.size() - 1) / warmup_epochs + 1)

        super().__init__(initial_lr, multiplier, start_epoch=0, end_epoch=warmup_epochs, staircase=False,
                         momentum_correction=momentum_correction, steps_per_epoch=steps_per_epoch)
        self.verbose = verbose

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        if epoch == self.end_epoch - 1 and self.verbose > 0 and mpi_ops.rank() == 0:
            print(f'\nEpoch {epoch + 1}: finished gradual learning rate warmup to {_get_lr(self.model.optimizer):g}.')


class BestModelCheckpoint(_flavour.keras.callbacks.ModelCheckpoint):
    """Horovod's ModelCheckpoint that keeps the best model only, whose file the caller names later
    (Horovod's Spark KerasEstimator sets `filepath` to its run's checkpoint). Keras 3 checks the
    file name's extension when the callback is made, so until then it holds a placeholder name of
    the right kind; Keras 2 takes None, as in Horovod."""

    def __init__(self, monitor='val_loss', verbose=0, save_weights_only=False, mode='auto', save_freq='epoch'):
        keras3 = _flavour.__name__.endswith("keras3")
        placeholder = ("best.weights.h5" if save_weights_only else "best.keras") if keras3 else None
        super().__init__(filepath=placeholder, monitor=monitor, verbose=verbose, save_best_only=True,
                         save_weights_only=save_weights_only, mode=mode, save_freq=save_freq)

    def _set_monitor_op(self):
        """Keras 3 resolves mode='auto' from the model's compiled metrics and raises for any other
        name; Horovod's callback, written for Keras 2, means Keras 2's rule there: maximise what
        looks like accuracy, minimise the rest. (Keras 2 resolves the mode itself, in __init__.)"""
        try:
            super()._set_monitor_op()
        except ValueError:
            if self.mode != "auto":
                raise
            import keras
            maximise = "acc" in self.monitor or self.monitor.startswith("fmeasure")
            self.monitor_op = keras.ops.greater if maximise else keras.ops.less
            if not maximise:
                self.min_delta *= -1   # as Keras 3 does for a minimised metric
