"""R2SP's answer to heterogeneous workers: give each rank a batch size proportional to its speed.

    tuner = BatchSizeTuner(global_batch_size=256)
    for step in ...:
        x, y = next_batch(tuner.local_batch_size)
        with tuner.timed():                       # forward + backward on this rank
            loss = F.cross_entropy(model(x), y) * tuner.loss_scale()
            loss.backward()
        optimizer.step()                          # hvd.DistributedOptimizer: averages gradients
        tuner.step()                              # every `interval` steps: re-split the batch

Every `interval` steps the ranks allgather their measured samples per second and split the global
batch in proportion (largest remainders, every rank at least `min_batch_size`); all ranks compute
the same split from the same numbers. loss_scale() = local_batch * size / global_batch makes
DistributedOptimizer's average of the ranks' gradients equal the gradient of the mean loss over
the whole global batch, whatever the split.
"""

import contextlib
import time

import torch

from hvd_herring.torch import mpi_ops


def split_in_proportion(total, speeds, minimum=1):
    """Integer batch sizes summing to `total`, proportional to `speeds`, each >= minimum."""
    n = len(speeds)
    if total < n * minimum:
        raise ValueError(f"a global batch of {total} cannot give {n} ranks at least {minimum} each")
    spare = total - n * minimum
    weight = sum(speeds)
    exact = [spare * s / weight for s in speeds]
    sizes = [minimum + int(e) for e in exact]
    # Largest remainders get the leftovers; ties go to the lower rank (deterministic everywhere).
    order = sorted(range(n), key=lambda i: (-(exact[i] - int(exact[i])), i))
    for i in order[:total - sum(sizes)]:
        sizes[i] += 1
    return sizes


class BatchSizeTuner:
    def __init__(self, global_batch_size, min_batch_size=1, interval=20, process_set=mpi_ops.global_process_set):
        self.global_batch_size = int(global_batch_size)
        self.min_batch_size = int(min_batch_size)
        self.interval = int(interval)
        self.process_set = process_set
        n = process_set.size()
        self.sizes = split_in_proportion(self.global_batch_size, [1.0] * n, self.min_batch_size)
        self._seconds = 0.0
        self._samples = 0
        self._steps = 0
        self._retunes = 0

    @property
    def local_batch_size(self):
        return self.sizes[self.process_set.rank()]

    def loss_scale(self):
        """Multiply the (mean) loss by this so that averaging gradients over ranks weights each
        rank by its batch size."""
        return self.local_batch_size * self.process_set.size() / self.global_batch_size

    @contextlib.contextmanager
    def timed(self):
        """Times this rank's compute for one step (forward and backward)."""
        start = time.perf_counter()
        yield
        self.record(time.perf_counter() - start, self.local_batch_size)

    def record(self, seconds, samples):
        self._seconds += seconds
        self._samples += samples

    def step(self):
        """Call once per step on every rank; re-splits the batch every `interval` steps (a
        collective). Returns True when the split changed."""
        self._steps += 1
        if self._steps % self.interval:
            return False
        speed = self._samples / self._seconds if self._seconds > 0 else 1.0
        self._seconds, self._samples = 0.0, 0
        speeds = mpi_ops.allgather(torch.tensor([speed], dtype=torch.float64),
                                   name=f"batch_tuner.speeds.{self._retunes}", process_set=self.process_set)
        self._retunes += 1
        sizes = split_in_proportion(self.global_batch_size, speeds.tolist(), self.min_batch_size)
        changed = sizes != self.sizes
        self.sizes = sizes
        return changed
