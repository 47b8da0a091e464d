"""R2SP's heterogeneous batch tuning (hvd_herring.torch.BatchSizeTuner): batch sizes follow the
ranks' measured speeds, and the loss scale keeps the averaged gradient equal to the full batch's."""

import os

import launch
from hvd_herring.torch.batch_tuner import split_in_proportion

WORKER = os.path.join("tests", "cluster", "workers", "batch_tuner_worker.py")


def test_split_in_proportion():
    assert split_in_proportion(60, [1, 1, 1, 0.25]) == [18, 18, 18, 6]
    assert sum(split_in_proportion(101, [3.3, 1.1, 7.7])) == 101
    assert min(split_in_proportion(10, [100, 100, 0.001], minimum=2)) == 2


def test_tuned_batches_in_real_ranks():
    run, per_rank = launch.run_with_results(launch.horovodrun, 3, [WORKER], prefix="herring-tuner-", timeout=180)
    assert run.returncode == 0, run.output[-4000:]
    for r in range(3):
        res = per_rank[r]
        assert res["max_diff"] < 2e-5, res["max_diff"]
        final = res["history"][-1]
        assert sum(final) == 60
        # Rank 2 is four times slower per sample: about a quarter of the others' share.
        assert final[2] < final[0] / 2 and final[2] < final[1] / 2, res["history"]
