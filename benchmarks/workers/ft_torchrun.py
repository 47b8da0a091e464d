"""(d) of the fault-tolerance benchmark: DDP on gloo under `torchrun --max-restarts K`, restarting
from a checkpoint. Every rank loads $FT_RESULTS/ckpt.pt if it exists (the step to go on from and
the weights); rank 0 saves it after each committed step (write, then rename). A victim SIGKILLs
itself at its step; torchrun stops the others and starts the group again, which loads the
checkpoint and goes on at the full size. FT_* as in ft_common."""

import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ft_common as ft  # noqa: E402


def main():
    steps, kills, results = ft.config()
    # torchrun's agent store outlives a restart and still holds the previous attempt's gloo
    # endpoints (a restarted group connects to dead ports and fails): each attempt keys its
    # rendezvous under its own prefix.
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                          timeout=timedelta(seconds=60))
    dist.init_process_group("gloo", store=dist.PrefixStore(f"attempt{attempt}", store),
                            rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]),
                            timeout=timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    model = ft.make_model()
    ckpt = os.path.join(results, "ckpt.pt")
    step = 0
    if os.path.exists(ckpt):
        state = torch.load(ckpt)
        model.load_state_dict(state["model"])
        step = state["step"]
    ddp = DDP(model)
    opt = torch.optim.SGD(model.parameters(), lr=ft.LR)
    log = ft.Log(results, rank)
    members = list(range(world))
    while step < steps:
        ft.die_if_victim(results, kills, step, rank)
        x, y = ft.batch(step, rank)
        opt.zero_grad(set_to_none=True)
        ft.loss_fn(ddp(x), y).backward()
        opt.step()
        log.commit(step, members)
        step += 1
        if rank == 0:
            torch.save({"model": model.state_dict(), "step": step}, ckpt + ".tmp")
            os.replace(ckpt + ".tmp", ckpt)
    ft.save_final(results, rank, model)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
