"""What a data-parallel TF training run must show, read from the ranks' results ({rank: result},
result["results"][variant] per variant): the Keras 3 tests (test_tensorflow_training.py) and the
Keras 2 ones (test_tensorflow_keras2.py) hold their workers to these same expectations."""

import numpy as np


def assert_matches_reference(results, variant, label=""):
    """Every rank's weights within 2e-5 of the single-process reference."""
    for rank, res in results.items():
        diff = res["results"][variant]["max_diff"]
        assert diff < 2e-5, f"{label}rank {rank} {variant}: {diff}"


def assert_metrics_averaged(results, variant, np_):
    """The history's losses are the mean of the ranks' own (which differ: each has its data)."""
    for rank, res in results.items():
        local = np.array(res["results"][variant]["local_losses"])  # [rank][epoch], before averaging
        history = np.array(res["results"][variant]["history_losses"])
        assert local.shape[0] == np_
        assert not np.allclose(local[0], local[-1]), "the ranks' own losses should differ (different data)"
        assert np.allclose(history, local.mean(axis=0), rtol=1e-6), (rank, history, local)


def assert_learning_rate_warmup(results, np_):
    """LearningRateWarmupCallback(initial_lr, warmup_epochs=2): initial_lr / size at the start,
    initial_lr * (1/size) * ((epoch + 1) * (size - 1) / 2 + 1) at the end of epoch `epoch`."""
    for rank, res in results.items():
        lr = res["lr"]
        expected = [lr / np_ * ((e + 1) * (np_ - 1) / 2 + 1) for e in range(2)] + [lr]
        assert np.allclose(res["results"]["groups_fp16_warmup"]["lr"], expected, rtol=1e-6), (rank, expected)
