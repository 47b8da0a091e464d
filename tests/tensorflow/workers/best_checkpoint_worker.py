"""One process, either Keras flavour (TF_USE_LEGACY_KERAS): horovod.tensorflow.keras.callbacks.
BestModelCheckpoint made without a file, given one later (as Horovod's KerasEstimator does), saves
the best epoch's model there. Prints the flavour, the file name it was made with, and whether the
saved model's weights equal the trained model's (the loss falls every epoch: the best is the last)."""

import os
import sys

import numpy as np
import tensorflow as tf

import horovod.tensorflow.keras as hvd


def main(directory):
    keras = tf.keras
    flavour = "keras2" if keras.layers.Layer.__module__.startswith("tf_keras") else "keras3"
    callback = hvd.callbacks.BestModelCheckpoint(monitor="loss")
    made_with = callback.filepath
    callback.filepath = os.path.join(directory, "best.h5")
    inputs = keras.Input(shape=(2,))
    model = keras.Model(inputs, keras.layers.Dense(1)(inputs))
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    x = np.random.default_rng(0).uniform(-1, 1, (64, 2)).astype("float32")
    y = x @ np.array([[1.0], [-2.0]], dtype="float32")
    history = model.fit(x, y, epochs=4, batch_size=64, verbose=0, callbacks=[callback])
    saved = keras.models.load_model(callback.filepath, compile=False)
    same = all(np.array_equal(a, b) for a, b in zip(saved.get_weights(), model.get_weights()))
    falling = all(a > b for a, b in zip(history.history["loss"], history.history["loss"][1:]))
    print(f"RESULT {flavour} made_with={made_with} best_only={callback.save_best_only} falling={falling} same={same}")
    print(f"AUTO {auto_mode_minimises(model, directory)}")


def auto_mode_minimises(model, directory):
    """mode='auto' on a metric the model was not compiled with (as Horovod's Spark test drives it):
    Horovod's meaning, from Keras 2, minimises it. Returns the epochs whose model was saved."""
    callback = hvd.callbacks.BestModelCheckpoint(monitor="binary_crossentropy")
    callback.filepath = os.path.join(directory, "auto.h5")
    callback.set_model(model)
    saved = []
    for epoch, value in enumerate([0.3, 0.5, 0.1]):
        if os.path.exists(callback.filepath):
            os.remove(callback.filepath)
        callback.on_epoch_end(epoch, logs={"binary_crossentropy": value})
        if os.path.exists(callback.filepath):
            saved.append(epoch)
    return saved


if __name__ == "__main__":
    main(sys.argv[1])
