"""Ranks for tests/torch_distributed/test_torch_restarts.py on torch.distributed's backend "herring".

  train   (torchrun --max-restarts 1): trains a small model for STEPS steps, averaging gradients
          with all_reduce, rank 0 checkpointing after every step; in the first attempt
          (TORCHELASTIC_RESTART_COUNT 0) rank FAIL_RANK raises at step FAIL_STEP, and the restarted
          attempt resumes from the last checkpoint (its rank 0 starts a second late, so that the
          others meet the first attempt's records in torchrun's store). Rank 0 of the attempt that finishes writes the
          weights; every rank writes what it saw (attempt, step it resumed from, how long
          init_process_group took, and in the first attempt the error the survivor got).
  crash   (plain processes, env://): 3 ranks reduce together, then rank 2 dies while ranks 0 and 1
          wait for it in a world all_reduce: by an uncaught exception (HERRING_CRASH=exception) or
          by SIGKILL (HERRING_CRASH=sigkill). The survivors record the errors they get, how long
          they took, and a second collective (in group [0, 1]) after it.

Each rank writes $HERRING_TEST_RESULTS/<rank>.json (train: <attempt>.<rank>.json)."""

import json
import os
import signal
import sys
import time
from datetime import timedelta

STARTED = time.monotonic()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import hvd_herring.torch.distributed  # noqa: E402,F401  (registers "herring")

IMPORTED = time.monotonic()

STEPS = 10
FAIL_STEP = 5
FAIL_RANK = int(os.environ.get("HERRING_FAIL_RANK", "1"))
TIMEOUT = timedelta(seconds=float(os.environ.get("HERRING_TEST_TIMEOUT", "60")))
RESULTS = os.environ.get("HERRING_TEST_RESULTS", "")


def model_and_optimizer():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def batch(rank, step):
    """This rank's data at this step: the same in every attempt."""
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(4, 8, generator=g)
    return x, x.sum(dim=1, keepdim=True).sin()


def local_gradients(model, rank, step):
    model.zero_grad()
    x, y = batch(rank, step)
    torch.nn.functional.mse_loss(model(x), y).backward()
    return [p.grad.clone() for p in model.parameters()]


def reference_weights(size):
    """The uninterrupted run in one process: every step's gradients of every rank, summed in rank
    order and halved, as the engine's Average of two does."""
    model, opt = model_and_optimizer()
    for step in range(STEPS):
        grads = [local_gradients(model, r, step) for r in range(size)]
        for i, p in enumerate(model.parameters()):
            total = grads[0][i].clone()
            for r in range(1, size):
                total += grads[r][i]
            p.grad = total / size
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def write(name, record):
    with open(os.path.join(RESULTS, name), "w") as f:
        json.dump(record, f)


def train():
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    if attempt > 0 and os.environ["RANK"] == "0":
        # Rank 0 comes late: until it writes, the store holds only the first attempt's records.
        time.sleep(1.0)
    dist.init_process_group("herring", timeout=TIMEOUT)
    rank, size = dist.get_rank(), dist.get_world_size()
    record = {"attempt": attempt, "import_seconds": IMPORTED - STARTED, "init_seconds": time.monotonic() - IMPORTED,
              "resumed_from": None}
    model, opt = model_and_optimizer()
    checkpoint = os.path.join(RESULTS, "checkpoint.pt")
    first = 0
    if os.path.exists(checkpoint):
        state = torch.load(checkpoint)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        first = record["resumed_from"] = state["next_step"]
    try:
        for step in range(first, STEPS):
            if attempt == 0 and step == FAIL_STEP and rank == FAIL_RANK:
                record["raised_at_step"] = step
                write(f"{attempt}.{rank}.json", record)
                raise RuntimeError(f"injected failure of rank {rank} at step {step}")
            grads = local_gradients(model, rank, step)
            for p, g in zip(model.parameters(), grads):
                dist.all_reduce(g, op=dist.ReduceOp.AVG)
                p.grad = g
            opt.step()
            if rank == 0:
                tmp = checkpoint + ".tmp"
                torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "next_step": step + 1}, tmp)
                os.replace(tmp, checkpoint)
    except Exception as e:
        record["error"] = f"{type(e).__name__}: {e}"
        record["error_after_seconds"] = time.monotonic() - STARTED
        write(f"{attempt}.{rank}.json", record)
        raise
    if rank == 0:
        torch.save([p.detach() for p in model.parameters()], os.path.join(RESULTS, "weights.pt"))
    record["total_seconds"] = time.monotonic() - STARTED
    write(f"{attempt}.{rank}.json", record)
    dist.destroy_process_group()


def crash():
    how = os.environ["HERRING_CRASH"]
    dist.init_process_group("herring", timeout=TIMEOUT)
    rank = dist.get_rank()
    pair = dist.new_group([0, 1])
    for _ in range(3):
        t = torch.ones(1000)
        dist.all_reduce(t)
        assert torch.all(t == 3), t[:3]
    if rank == 2:
        time.sleep(0.5)  # ranks 0 and 1 are waiting in the next all_reduce by now
        if how == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise ValueError("injected failure of rank 2 while the others wait for it")
    record = {}
    started = time.monotonic()
    try:
        dist.all_reduce(torch.ones(1000))
        record["world_error"] = None
    except Exception as e:  # noqa: BLE001  (the message is what is checked)
        record["world_error"] = f"{type(e).__name__}: {e}"
    record["world_error_seconds"] = time.monotonic() - started
    try:
        dist.all_reduce(torch.ones(10), group=pair)
        record["pair_error"] = None
    except Exception as e:  # noqa: BLE001
        record["pair_error"] = f"{type(e).__name__}: {e}"
    write(f"{rank}.json", record)
    sys.stdout.flush()
    os._exit(0)  # the job failed: nothing to leave in order


def main():
    if sys.argv[1:] == ["reference"]:
        torch.save(reference_weights(int(os.environ["WORLD_SIZE"])), os.path.join(RESULTS, "reference.pt"))
        return
    {"train": train, "crash": crash}[os.environ["HERRING_SCENARIO"]]()


if __name__ == "__main__":
    main()
