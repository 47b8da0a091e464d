"""R2SP training mode: the server shards hold the parameters; workers take round-robin turns.

    trainer = R2SPTrainer(model.parameters(), lr=0.05, momentum=0.9)
    for x, y in batches:                 # every worker takes the same number of steps
        trainer.zero_grad()
        F.mse_loss(model(x), y).backward()
        trainer.step()                   # push this rank's gradient in its turn, pull the result
    trainer.close()                      # after the last step (a barrier, then the servers stop)

Instead of averaging the workers' gradients every step (DistributedOptimizer), each worker's
gradient is its own SGD update, applied by the server shards in a fixed round-robin order (rank 0,
1, ..., N-1, 0, ...), as in the R2SP paper. A worker never waits for the others to finish a step
together, only for its turn at the servers; with `stagger` the first turns are spread over one
step time so the workers' pushes reach the servers evenly gapped.

Staleness bound: a gradient is applied at most N - 1 updates after the parameters it was computed
on (N = hvd.size()): exactly N - 1 in steady state, rank r's first gradient r. The order of the
updates is fixed, so results are bitwise identical from run to run. The servers run SGD in float32
with torch.optim.SGD's formula (momentum without dampening, L2 weight decay).

The model's parameters become views into one flat float32 buffer that every step overwrites in
place. Sharding follows the job's server layout (colocated shards or HERRING_DEDICATED_SERVERS);
it is fixed for the session's life: dedicated servers joining or leaving, and the PSLD balancer,
apply to the allreduce only.
"""

import time

import torch

from hvd_herring.torch import mpi_ops


class R2SPTrainer:
    def __init__(self, params, lr, momentum=0.0, weight_decay=0.0, stagger=True, root_rank=0):
        self.params = [p for p in params if p.requires_grad]
        if not self.params:
            raise ValueError("R2SPTrainer: no parameters that require gradients")
        for i, p in enumerate(self.params):
            if p.dtype != torch.float32 or p.device.type != "cpu":
                raise ValueError(f"R2SPTrainer: parameter {i} (shape {tuple(p.shape)}) is {p.dtype} on "
                                 f"{p.device}; the servers train float32 parameters on the CPU")
        self._sizes = [p.numel() for p in self.params]
        total = sum(self._sizes)
        self._flat = torch.empty(total, dtype=torch.float32)
        self._grad = torch.zeros(total, dtype=torch.float32)
        offset = 0
        for p, n in zip(self.params, self._sizes):
            self._flat[offset:offset + n].copy_(p.detach().reshape(-1))
            offset += n
        # Every worker starts from root_rank's parameters, which rank 0 hands to the servers.
        mpi_ops.broadcast_(self._flat, root_rank, name="r2sp.initial_parameters")
        offset = 0
        for p, n in zip(self.params, self._sizes):
            p.data = self._flat[offset:offset + n].view_as(p)
            offset += n
        self._engine = mpi_ops._basics.engine()
        self.session = self._engine.r2sp_begin(self._flat.numpy(), float(lr), float(momentum),
                                               float(weight_decay))
        self.stagger = stagger
        self.steps = 0
        self._started = time.monotonic()

    @property
    def staleness_bound(self):
        """Updates between the parameters a gradient was computed on and the ones it is applied to."""
        return mpi_ops.size() - 1

    def zero_grad(self):
        for p in self.params:
            p.grad = None

    def step(self):
        """Pushes this rank's gradient in its turn; the model then holds the parameters it produced."""
        if self.session is None:
            raise RuntimeError("R2SPTrainer: step() after close()")
        offset = 0
        for p, n in zip(self.params, self._sizes):
            if p.grad is None:
                self._grad[offset:offset + n].zero_()
            else:
                self._grad[offset:offset + n].copy_(p.grad.reshape(-1))
            offset += n
        if self.steps == 0 and self.stagger:
            # Evenly gapped turns: rank r starts r/N of a step time after rank 0, and the fixed
            # turn order keeps that phase from then on.
            first_step_seconds = time.monotonic() - self._started
            time.sleep(first_step_seconds * mpi_ops.rank() / mpi_ops.size())
        self._engine.r2sp_step(self.session, self._grad.numpy(), self._flat.numpy())
        self.steps += 1

    def close(self):
        """After every worker's last step: waits for the others, then the servers stop."""
        if self.session is None:
            return
        mpi_ops.barrier()
        self._engine.r2sp_end(self.session)
        self.session = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            self.close()
