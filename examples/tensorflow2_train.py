"""Data-parallel training of a small CNN with Horovod's TensorFlow 2 API (GradientTape loop).

An ordinary Horovod script: run it with stock Horovod, or on the herring engine with
    HOROVOD_BACKEND=herring horovodrun --gloo -np 4 -H localhost:4 python examples/tensorflow2_train.py

The data is synthetic (no downloads): ten random prototype images, and samples that are a
prototype plus noise, labelled by their prototype, so the model has something real to learn.
Every rank starts from different random weights; hvd.broadcast_variables makes them equal,
DistributedGradientTape keeps them equal, and the script checks that at the end.
"""

import os
import time

import numpy as np
import tensorflow as tf

import horovod.tensorflow as hvd
from example_training import add_num_groups, finish, rank_shard, training_parser
from tf_synthetic_cnn import make_model, synthetic_dataset


def main():
    parser = training_parser(__doc__)
    add_num_groups(parser)
    args = parser.parse_args()

    hvd.init()
    threads = max(1, (os.cpu_count() or 1) // hvd.local_size())
    tf.config.threading.set_intra_op_parallelism_threads(threads)

    x, y = rank_shard(hvd, *synthetic_dataset(args.samples))
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(args.batch_size, drop_remainder=True)

    tf.keras.utils.set_random_seed(100 + hvd.rank())  # deliberately different starting weights per rank
    model = make_model()
    optimizer = tf.keras.optimizers.SGD(args.lr * hvd.size(), momentum=0.9)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    hvd.broadcast_variables(model.variables, root_rank=0)

    @tf.function
    def training_step(images, labels):
        with tf.GradientTape() as tape:
            logits = model(images, training=True)
            loss = loss_fn(labels, logits)
        tape = hvd.DistributedGradientTape(tape, groups=args.num_groups or None)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        correct = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, axis=1, output_type=tf.int32), labels), tf.float32))
        return loss, correct

    for epoch in range(1, args.epochs + 1):
        start = time.perf_counter()
        total_loss, correct, steps = 0.0, 0.0, 0
        for images, labels in dataset:
            loss, right = training_step(images, labels)
            total_loss += float(loss)
            correct += float(right)
            steps += 1
        loss = float(hvd.allreduce(tf.constant(total_loss / steps), name="epoch_loss"))
        accuracy = float(hvd.allreduce(tf.constant(correct / (steps * args.batch_size)), name="epoch_accuracy"))
        if hvd.rank() == 0:
            print(f"epoch {epoch}: loss {loss:.4f}  accuracy {accuracy:.3f}  "
                  f"({time.perf_counter() - start:.1f} s, {hvd.size()} ranks)", flush=True)

    # Every rank must hold exactly the same weights.
    flat = tf.concat([tf.reshape(v, [-1]) for v in model.trainable_variables], axis=0)
    gathered = hvd.allgather(flat[None, :]).numpy()
    finish(hvd, gathered, np.array_equal)


if __name__ == "__main__":
    main()
