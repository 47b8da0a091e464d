"""Shared by the fault-tolerance benchmark's workers (benchmarks/fault_tolerance/run.py): the
model, the data, the schedule of kills and the records each rank writes.

- model: a small MLP (IN -> HIDDEN -> HIDDEN -> OUT, tanh), built from a fixed seed;
- data: one batch per (step, original rank), from a generator seeded by both, so a replay knows
  exactly what each member contributed to each step;
- optimizer: plain SGD (no state), so a committed step is w -= LR * mean of the members' grads;
- records ($FT_RESULTS): <orig rank>.jsonl, one line per committed step {"step", "members" (the
  original ranks that contributed), "t" (time.time() after optimizer.step())}; killed_<step>: the
  victim's time.time() just before it SIGKILLs itself; final_<orig rank>.pt: the weights at the end.
"""

import json
import os
import signal
import time

import torch

IN, HIDDEN, OUT, BATCH = 32, 64, 8, 16
LR = 0.05
SEED = 1234


def config():
    """From the environment the driver sets: steps, kills {step: original rank}, results dir."""
    kills = {}
    for item in filter(None, os.environ.get("FT_KILLS", "").split(",")):
        step, rank = item.split(":")
        kills[int(step)] = int(rank)
    return int(os.environ["FT_STEPS"]), kills, os.environ["FT_RESULTS"]


def make_model(dtype=torch.float32):
    torch.manual_seed(SEED)
    model = torch.nn.Sequential(
        torch.nn.Linear(IN, HIDDEN), torch.nn.Tanh(),
        torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.Tanh(),
        torch.nn.Linear(HIDDEN, OUT))
    return model.to(dtype)


def batch(step, orig_rank, dtype=torch.float32):
    g = torch.Generator().manual_seed(SEED * 7919 + step * 1009 + orig_rank)
    x = torch.randn(BATCH, IN, generator=g, dtype=torch.float64)
    y = torch.randn(BATCH, OUT, generator=g, dtype=torch.float64)
    return x.to(dtype), y.to(dtype)


def loss_fn(out, y):
    return torch.nn.functional.mse_loss(out, y)


class Log:
    def __init__(self, results, orig_rank):
        self.f = open(os.path.join(results, f"{orig_rank}.jsonl"), "a", buffering=1)

    def commit(self, step, members):
        self.f.write(json.dumps({"step": step, "members": list(members), "t": time.time()}) + "\n")


def die_if_victim(results, kills, step, orig_rank):
    """The victim of `step` writes its clock and SIGKILLs itself (once: a restarted attempt that
    reaches the step again does not die again)."""
    if kills.get(step) != orig_rank:
        return
    path = os.path.join(results, f"killed_{step}")
    if os.path.exists(path):
        return
    with open(path + ".tmp", "w") as f:
        f.write(repr(time.time()))
    os.replace(path + ".tmp", path)
    os.kill(os.getpid(), signal.SIGKILL)


def save_final(results, orig_rank, model):
    torch.save({k: v.detach().clone() for k, v in model.state_dict().items()},
               os.path.join(results, f"final_{orig_rank}.pt"))
