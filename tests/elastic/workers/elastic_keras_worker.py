"""The Keras counterpart of elastic_torch_worker.py: `model.fit` under hvd.elastic.run with Horovod's
elastic callbacks (CommitStateCallback, UpdateBatchStateCallback, UpdateEpochStateCallback) and an
hvd.elastic.KerasState, carrying out a scenario of tests/elastic/workers/elastic_common.py. The Keras
flavour is whatever tf.keras is: Keras 3, or Keras 2 (tf_keras) with TF_USE_LEGACY_KERAS=1.

The scenario's step counter is a callback of its own placed before CommitStateCallback, so each
commit holds the step just trained. One fit call runs the remaining steps as one epoch: after a
reset the next call starts a new epoch at the committed step (Keras 3 ignores the resumed epoch
length that UpdateBatchStateCallback sets, so epochs of several steps would repeat steps there)."""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import horovod.tensorflow.keras as hvd  # noqa: E402

import elastic_common as common  # noqa: E402


class ScenarioCallback(tf.keras.callbacks.Callback):
    """Runs the scenario around each batch of fit: host changes before it, the scripted failure
    at its start (the other ranks are then in the batch's gradient allreduce), the step record
    after it."""

    def __init__(self, scenario, state):
        super().__init__()
        self.scenario, self.state = scenario, state

    def on_train_batch_begin(self, batch, logs=None):
        step = self.state.step
        action = self.scenario.before_step(self.state, step)
        self.scenario.mid_step(step, action)

    def on_train_batch_end(self, batch, logs=None):
        self.scenario.after_step(self.state, self.state.step)


def batches(first_step, rank):
    """The batches of steps first_step, first_step + 1, ... for this rank, in fit's order."""
    step = first_step
    while True:
        yield common.batch(step, rank)
        step += 1


def main():
    hvd.init()
    tf.keras.backend.set_floatx("float64")  # the loss too, so that the float64 reference holds
    model = tf.keras.Sequential([tf.keras.Input((common.IN_FEATURES,)), tf.keras.layers.Dense(1)])
    model.layers[0].set_weights(list(common.initial_weights()))
    optimizer = hvd.DistributedOptimizer(
        tf.keras.optimizers.SGD(learning_rate=common.LR, momentum=common.MOMENTUM))
    model.compile(optimizer=optimizer, loss="mse")
    optimizer.build(model.trainable_variables)  # its momenta exist before the state copies them
    state = hvd.elastic.KerasState(model, step=0, history=[], batch=0, epoch=0)
    scenario = common.Scenario(hvd)
    callbacks = [ScenarioCallback(scenario, state),
                 hvd.elastic.UpdateBatchStateCallback(state),
                 hvd.elastic.UpdateEpochStateCallback(state),
                 hvd.elastic.CommitStateCallback(state, batches_per_commit=1)]

    @hvd.elastic.run
    def train(state):
        scenario.begin_round(state)
        remaining = scenario.steps - state.step
        if remaining > 0:
            model.fit(batches(state.step, hvd.rank()), steps_per_epoch=remaining, epochs=1,
                      callbacks=callbacks, verbose=0)

    train(state)
    kernel, bias = model.layers[0].get_weights()
    # Both Keras flavours turn the momentum (a Python float) into a float32 tensor before casting
    # it to the variables' float64; the learning rate is a float64 variable under floatx float64.
    scenario.finish(state, kernel, bias, lr=float(np.asarray(optimizer.learning_rate)),
                    momentum=float(np.float32(common.MOMENTUM)))


if __name__ == "__main__":
    main()
    sys.exit(0)
