"""KerasEstimator's training function for Keras 3 (Horovod's RemoteTrainer contract).

RemoteTrainer(estimator, metadata, keras_utils, run_id, dataset_idx) returns the function each
rank runs: train(serialized_model, train_rows, val_rows, avg_row_size), which returns
(history, serialized fitted model, number of ranks) on rank 0. Horovod 0.28.1's trainer is written
for Keras 2 (optimizer.lr, HDF5 models in h5py files, a checkpoint without an extension), so under
Keras 3 the estimator uses this one: the same parameters, data module, callbacks and learning-rate
scaling, with Keras 3's spellings and the `.keras` format (keras3_serialization)."""

import math
import os

from hvd_herring.spark import keras3_model, keras3_serialization as serialization


def _steps(rows, batch_size, size, override):
    if override is not None:
        return override
    return int(math.ceil(float(rows) / batch_size / size))


def RemoteTrainer(estimator, metadata, keras_utils, run_id, dataset_idx):
    from horovod.spark.common.util import _set_mp_start_method
    from horovod.spark.keras import remote as horovod_remote

    feature_columns, label_columns = estimator.getFeatureCols(), estimator.getLabelCols()
    sample_weight_col = estimator.getSampleWeightCol()
    batch_size = estimator.getBatchSize()
    val_batch_size = estimator.getValBatchSize() or batch_size
    epochs = estimator.getEpochs()
    train_steps_per_epoch = estimator.getTrainStepsPerEpoch()
    validation_steps_per_epoch = estimator.getValidationStepsPerEpoch()
    should_validate = estimator.getValidation()
    custom_objects = estimator.getCustomObjects()
    user_callbacks = estimator.getCallbacks() or []
    random_seed, shuffle = estimator.getRandomSeed(), estimator.getShuffle()
    user_verbose = estimator.getVerbose()
    checkpoint_callback = estimator.getCheckpointCallback()
    use_gpu, mp_start_method = estimator.getUseGpu(), estimator.getMpStartMethod()
    data_module = estimator.getDataModule()
    data_module_settings = dict(
        num_train_epochs=epochs, has_val=should_validate is not None, train_batch_size=batch_size,
        val_batch_size=val_batch_size, shuffle=shuffle, transform_fn=estimator.getTransformationFn(),
        inmemory_cache_all=estimator.getInMemoryCacheAll(), random_seed=random_seed,
        reader_pool_type=estimator.getReaderPoolType(),
        train_reader_worker_count=estimator.getTrainReaderNumWorker(),
        val_reader_worker_count=estimator.getValReaderNumWorker(),
        categorical_cols=estimator.getCategoricalCols(), continuous_cols=estimator.getContinuousCols(),
        label_cols=label_columns)

    input_shapes, output_shapes = estimator.get_model_shapes()
    # A plain list: Keras 3's tracked lists do not survive the pickling that ships this function.
    output_names = keras3_model.output_names(estimator.getModel())
    floatx = keras_utils.keras().backend.floatx()
    make_dataset = keras_utils.make_dataset_fn(
        feature_columns=feature_columns, label_columns=label_columns, sample_weight_col=sample_weight_col,
        metadata=metadata, input_shapes=input_shapes,
        label_shapes=estimator.getLabelShapes() or output_shapes, output_names=output_names)
    fit = keras_utils.fit_fn(epochs)
    pin_gpu = horovod_remote._pin_gpu_fn()

    store = estimator.getStore()
    remote_store = store.to_remote(run_id, dataset_idx)
    storage_options = store.storage_options

    def train(serialized_model, train_rows, val_rows, avg_row_size):
        import keras
        import tensorflow as tf
        import horovod.tensorflow.keras as hvd

        if mp_start_method:
            _set_mp_start_method(mp_start_method, user_verbose)
        keras.backend.set_floatx(floatx)
        hvd.init()
        verbose = user_verbose if hvd.rank() == 0 else 0
        if use_gpu:
            pin_gpu(hvd, tf, keras)
        if random_seed is not None:
            tf.random.set_seed(random_seed)

        with keras.utils.custom_object_scope(custom_objects):
            model = serialization.deserialize_model(serialized_model, hvd.load_model)
        scaled_lr = keras3_model.scale_learning_rate(model.optimizer, hvd.size())
        for callback in user_callbacks:
            if isinstance(callback, hvd.callbacks.LearningRateScheduleCallback) and scaled_lr is not None:
                callback.initial_lr = scaled_lr

        with remote_store.get_local_output_dir() as run_output_dir:
            callbacks = [hvd.callbacks.BroadcastGlobalVariablesCallback(root_rank=0),
                         # before the user's: metrics-based callbacks see the averaged metrics
                         hvd.callbacks.MetricAverageCallback()] + list(user_callbacks)
            ckpt_file = serialization.checkpoint_path(os.path.join(run_output_dir, remote_store.checkpoint_filename))
            if hvd.rank() == 0:   # one writer of the checkpoint and the logs
                if checkpoint_callback is not None:
                    checkpoint_callback.filepath = ckpt_file
                    callbacks.append(checkpoint_callback)
                else:
                    callbacks.append(keras.callbacks.ModelCheckpoint(ckpt_file))
                if remote_store.saving_runs:
                    logs_dir = os.path.join(run_output_dir, remote_store.logs_subdir)
                    board = next((c for c in callbacks if isinstance(c, keras.callbacks.TensorBoard)), None)
                    if board is None:
                        board = keras.callbacks.TensorBoard(logs_dir)
                    else:   # moved next to the store sync, as Horovod places it
                        callbacks.remove(board)
                        board.log_dir = logs_dir
                    callbacks += [board, _SyncCallback(run_output_dir, remote_store.sync)]

            steps_per_epoch = _steps(train_rows, batch_size, hvd.size(), train_steps_per_epoch)
            validation_steps = (_steps(val_rows, val_batch_size, hvd.size(), validation_steps_per_epoch)
                                if should_validate else validation_steps_per_epoch)
            schema_fields = feature_columns + label_columns + ([sample_weight_col] if sample_weight_col else [])
            if verbose:
                print(f"Training: epochs {epochs}, scaled lr {scaled_lr}, train rows {train_rows} in "
                      f"{steps_per_epoch} steps of {batch_size} per rank, val rows {val_rows} in "
                      f"{validation_steps} steps; checkpoint {ckpt_file}; data module {data_module}")
            dm = data_module(train_dir=remote_store.train_data_path, val_dir=remote_store.val_data_path,
                             cur_shard=hvd.rank(), shard_count=hvd.size(), schema_fields=schema_fields,
                             storage_options=storage_options, steps_per_epoch_train=steps_per_epoch,
                             steps_per_epoch_val=validation_steps, verbose=verbose, make_dataset=make_dataset,
                             **data_module_settings)
            history = fit(model, dm, steps_per_epoch, validation_steps, callbacks, verbose)
            if hvd.rank() == 0:
                # The checkpoint is the fitted model (or the best one, with the user's callback).
                return history.history, serialization.read_model_file(ckpt_file), hvd.size()

    return train


def _SyncCallback(root_path, sync_to_store):
    import keras

    class SyncToStore(keras.callbacks.Callback):
        """Copies the run's local output (checkpoint, logs) to the store after every epoch."""

        def on_epoch_end(self, epoch, logs=None):
            sync_to_store(root_path)

    return SyncToStore()
