"""(b)/(c) of the fault-tolerance benchmark: torchft's Manager, its DistributedDataParallel and
OptimizerWrapper, one replica group of 1 rank per process, on FT_PG = herring
(hvd_herring.torch.torchft.ProcessGroupHerring), gloo (torchft's ProcessGroupGloo) or babygloo
(ProcessGroupBabyGloo). The driver starts the Lighthouse (FT_LIGHTHOUSE) and the processes
(RANK = replica id = original rank, WORLD_SIZE replicas). A victim SIGKILLs itself at the start of
its step; the survivors' step fails to commit and the next quorum goes on without it (torchft's
defaults: the Lighthouse drops a replica whose heartbeats stop). Records as in ft_common, with
"participating" (whether this replica's gradients were in the step) for the replay."""

import json
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ft_common as ft  # noqa: E402


def make_pg(kind):
    if kind == "herring":
        from hvd_herring.torch.torchft import ProcessGroupHerring
        return ProcessGroupHerring(timeout=timedelta(seconds=10))
    from torchft.process_group import ProcessGroupBabyGloo, ProcessGroupGloo
    if kind == "gloo":
        return ProcessGroupGloo(timeout=timedelta(seconds=10))
    # BabyGloo's configure() starts a child process (torch imports): 10 s is not enough for 4 of
    # them at once on 2 cores. A lost peer still fails a collective at once (connection closed).
    return ProcessGroupBabyGloo(timeout=timedelta(seconds=60))


def ready_barrier(results, rank, world):
    """All replicas up (imports done) before any joins a quorum, so the first quorum has them all."""
    open(os.path.join(results, f"ready_{rank}"), "w").close()
    while not all(os.path.exists(os.path.join(results, f"ready_{r}")) for r in range(world)):
        time.sleep(0.01)


def main():
    from torchft.ddp import DistributedDataParallel
    from torchft.manager import Manager
    from torchft.optim import OptimizerWrapper

    steps, kills, results = ft.config()
    orig, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    model = ft.make_model()
    opt = torch.optim.SGD(model.parameters(), lr=ft.LR)
    store = dist.TCPStore("localhost", 0, is_master=True, wait_for_workers=False)
    pg = make_pg(os.environ["FT_PG"])
    ready_barrier(results, orig, world)
    manager = Manager(
        pg=pg, min_replica_size=2,
        load_state_dict=lambda sd: model.load_state_dict(sd["model"]),
        state_dict=lambda: {"model": model.state_dict()},
        replica_id=str(orig), store_addr="localhost", store_port=store.port, rank=0, world_size=1,
        lighthouse_addr=os.environ["FT_LIGHTHOUSE"], timeout=timedelta(seconds=10))
    ddp = DistributedDataParallel(manager, model)
    optimizer = OptimizerWrapper(manager, opt)
    log = open(os.path.join(results, f"{orig}.jsonl"), "a", buffering=1)
    while manager.current_step() < steps:
        step = manager.current_step()
        ft.die_if_victim(results, kills, step, orig)
        x, y = ft.batch(step, orig)
        optimizer.zero_grad(set_to_none=True)
        ft.loss_fn(ddp(x), y).backward()
        optimizer.step()
        if manager.current_step() == step + 1:  # committed
            log.write(json.dumps({"step": step, "t": time.time(),
                                  "participating": manager.participating_rank() is not None,
                                  "num_participants": manager.num_participants()}) + "\n")
    ft.save_final(results, orig, model)
    log.close()
    os._exit(0)  # not waiting for the Manager's threads and the peers


if __name__ == "__main__":
    main()
