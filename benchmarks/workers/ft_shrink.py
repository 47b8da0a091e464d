"""(a) of the fault-tolerance benchmark: DDP on herring in plain processes (env:// init, started
by the driver; no launcher that would stop the survivors). A victim SIGKILLs itself at its step;
the survivors' backward fails with dist.DistBackendError, they call
dist.shrink_group(lost_ranks_of(err)), wrap the model in DDP again on the new default group and redo
the step among themselves. RANK/WORLD_SIZE/MASTER_* from the driver; FT_* as in ft_common."""

import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import hvd_herring.torch.distributed  # registers "herring"; lost_ranks_of

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ft_common as ft  # noqa: E402


def main():
    steps, kills, results = ft.config()
    orig = int(os.environ["RANK"])
    dist.init_process_group("herring", init_method="env://", timeout=timedelta(seconds=60))
    members = list(range(dist.get_world_size()))  # original ranks, in current-rank order
    model = ft.make_model()
    ddp = DDP(model)
    opt = torch.optim.SGD(model.parameters(), lr=ft.LR)
    log = ft.Log(results, orig)
    step = 0
    while step < steps:
        ft.die_if_victim(results, kills, step, orig)
        x, y = ft.batch(step, orig)
        opt.zero_grad(set_to_none=True)
        try:
            ft.loss_fn(ddp(x), y).backward()
        except (dist.DistBackendError, RuntimeError) as err:
            # DDP's backward re-raises the collective's DistBackendError as a RuntimeError that
            # quotes it: lost_ranks_of reads the lost ranks from either.
            lost = hvd_herring.torch.distributed.lost_ranks_of(err)
            if not lost:
                raise
            dist.shrink_group(lost)
            members = [m for i, m in enumerate(members) if i not in lost]
            ddp = DDP(model)  # on the new default group
            continue  # the step again, among the survivors
        opt.step()
        log.commit(step, members)
        step += 1
    ft.save_final(results, orig, model)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
