"""The TensorFlow 2 counterpart of elastic_torch_worker.py: a Keras model trained with
hvd.DistributedGradientTape under hvd.elastic.run, its state an hvd.elastic.TensorFlowKerasState,
carrying out a scenario of tests/elastic/workers/elastic_common.py."""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import horovod.tensorflow as hvd  # noqa: E402

import elastic_common as common  # noqa: E402


def main():
    hvd.init()
    model = tf.keras.Sequential([tf.keras.Input((common.IN_FEATURES,), dtype="float64"),
                                 tf.keras.layers.Dense(1, dtype="float64")])
    model.layers[0].set_weights(list(common.initial_weights()))
    optimizer = tf.keras.optimizers.SGD(learning_rate=common.LR, momentum=common.MOMENTUM)
    optimizer.build(model.trainable_variables)  # its momenta exist before the state copies them
    state = hvd.elastic.TensorFlowKerasState(model, optimizer, step=0, history=[])

    @tf.function
    def traced_gradients(x, y):
        # Traced once, at the size the job has then; under HOROVOD_ELASTIC=1 the tape decides at
        # run time whether to reduce (HERRING_TEST_TF_FUNCTION=1 selects this step).
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x) - y) ** 2)
        return hvd.DistributedGradientTape(tape).gradient(loss, model.trainable_variables)

    def train_step(step, mid_step):
        x, y = common.batch(step, hvd.rank())
        if os.environ.get("HERRING_TEST_TF_FUNCTION") == "1":
            mid_step()
            grads = traced_gradients(tf.constant(x), tf.constant(y))
        else:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((model(tf.constant(x)) - tf.constant(y)) ** 2)
            mid_step()                      # a scripted failure happens here, before the allreduce
            grads = hvd.DistributedGradientTape(tape).gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))

    scenario = common.Scenario(hvd)
    hvd.elastic.run(lambda state: scenario.train(state, train_step))(state)
    kernel, bias = model.layers[0].get_weights()
    # Keras computes with float32 roundings of the learning rate and the momentum.
    scenario.finish(state, kernel, bias, lr=float(optimizer.learning_rate.numpy()),
                    momentum=float(np.float32(common.MOMENTUM)))


if __name__ == "__main__":
    main()
    sys.exit(0)
