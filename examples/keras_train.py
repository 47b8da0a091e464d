"""Data-parallel training of a small CNN with Horovod's Keras API (model.fit).

An ordinary Horovod script: run it with stock Horovod, or on the herring engine (Keras 3, which is
tf.keras in TensorFlow 2.21) with
    HOROVOD_BACKEND=herring horovodrun --gloo -np 4 -H localhost:4 python examples/keras_train.py
or with Keras 2 (tf_keras) as tf.keras:
    HOROVOD_BACKEND=herring TF_USE_LEGACY_KERAS=1 horovodrun --gloo -np 4 -H localhost:4 python examples/keras_train.py

The data is synthetic (no downloads): ten random prototype images, and samples that are a
prototype plus noise, labelled by their prototype. Every rank starts from different random
weights; BroadcastGlobalVariablesCallback makes them equal, DistributedOptimizer keeps them equal,
MetricAverageCallback reports metrics averaged over the ranks, and the script checks the weights
at the end.
"""

import os

import numpy as np
import tensorflow as tf

import horovod.tensorflow.keras as hvd
from example_training import finish, rank_shard, training_parser
from tf_synthetic_cnn import make_model, synthetic_dataset


class EpochReport(tf.keras.callbacks.Callback):
    """One line per epoch on rank 0, with the metrics averaged over the ranks."""

    def on_epoch_end(self, epoch, logs=None):
        if hvd.rank() == 0:
            print(f"epoch {epoch + 1}: loss {logs['loss']:.4f}  accuracy {logs['accuracy']:.3f}  "
                  f"lr {logs['lr']:.4f}  ({hvd.size()} ranks)", flush=True)


def main():
    parser = training_parser(__doc__)
    parser.add_argument("--warmup-epochs", type=int, default=1)
    parser.add_argument("--run-eagerly", action="store_true")
    args = parser.parse_args()

    hvd.init()
    tf.config.threading.set_intra_op_parallelism_threads(max(1, (os.cpu_count() or 1) // hvd.local_size()))

    x, y = rank_shard(hvd, *synthetic_dataset(args.samples))

    tf.keras.utils.set_random_seed(100 + hvd.rank())  # deliberately different starting weights per rank
    model = make_model()
    scaled_lr = args.lr * hvd.size()
    optimizer = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(scaled_lr, momentum=0.9))
    model.compile(optimizer=optimizer,
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"], run_eagerly=args.run_eagerly)
    callbacks = [
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        hvd.callbacks.MetricAverageCallback(),
        hvd.callbacks.LearningRateWarmupCallback(initial_lr=scaled_lr, warmup_epochs=args.warmup_epochs),
        EpochReport(),
    ]
    model.fit(x, y, batch_size=args.batch_size, epochs=args.epochs, callbacks=callbacks, verbose=0)

    # Every rank must hold exactly the same weights.
    flat = np.concatenate([w.ravel() for w in model.get_weights()])
    gathered = hvd.allgather(flat[None, :]).numpy()
    finish(hvd, gathered, np.array_equal)


if __name__ == "__main__":
    main()
