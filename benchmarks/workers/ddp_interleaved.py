"""DDP on herring beside DDP on gloo and Horovod's DistributedOptimizer on herring, in ONE job,
alternating rounds: on a shared, noisy machine the ratios of stacks measured in separate
launches swing by 2x; measured side by side in the same processes they hold.

    .venv/bin/torchrun --nproc-per-node 4 benchmarks/workers/ddp_interleaved.py resnet50 --steps 4 --rounds 3

Every rank's gradients are rank+1 (the gradient sets of gradient_sets.py); each setup's step is
forward + backward until every gradient is averaged (DDP: backward returns then; Horovod:
optimizer.synchronize()), timed after --warmup untimed steps of each setup. Prints the median and
minimum step time of each setup on rank 0."""

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import gradient_sets  # noqa: E402
import hvd_herring  # noqa: E402
import hvd_herring.torch.distributed as herring_dist  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model", choices=["resnet50", "bert-base", "resnet18"])
    p.add_argument("--steps", type=int, default=4, help="timed steps per setup and round")
    # DDP's first three steps are not its steady state: the first builds its buckets in parameter
    # order, the second rebuilds them in the order the gradients came and touches the new memory
    # (measured: about 540 ms against 200 ms for BERT-base at np=4), the third moves them into
    # zero-copy memory on herring (HERRING_DIST_ZERO_COPY).
    p.add_argument("--warmup", type=int, default=3, help="untimed steps per setup and round, first")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    dist.init_process_group("herring")
    import hvd_herring.torch as hvd
    hvd.init()  # the same engine
    torch.set_num_threads(1)
    rank, size = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    coef = torch.tensor(float(rank + 1))

    def ddp(view=False, hook=False, group=None):
        def make():
            model = gradient_sets.gradient_set_module(args.model)
            wrapped = torch.nn.parallel.DistributedDataParallel(model, gradient_as_bucket_view=view,
                                                                process_group=group)
            if hook:
                wrapped.register_comm_hook(None, herring_dist.average_hook)
            return model, lambda: wrapped(coef).backward()
        return make

    def horovod():
        model = gradient_sets.gradient_set_module(args.model)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.0),
                                       named_parameters=model.named_parameters())
        return model, lambda: (model(coef).backward(), opt.synchronize())

    setups = {"ddp-gloo": ddp(group=gloo), "ddp-herring": ddp(), "ddp-herring bucket-view": ddp(view=True),
              "ddp-herring bucket-view + average_hook": ddp(view=True, hook=True), "horovod-herring": horovod}
    times = {k: [] for k in setups}
    in_place = {k: 0 for k in setups}  # allreduces of the timed steps that ran in zero-copy memory
    for _ in range(args.rounds):
        for name, make in setups.items():
            model, step = make()
            for i in range(args.warmup + args.steps):
                for p_ in model.parameters():
                    if p_.grad is not None:
                        p_.grad.zero_()
                dist.barrier()
                zero_copy_before = hvd_herring.counters()["zero_copy_allreduces"]
                start = time.perf_counter()
                step()
                if i >= args.warmup:
                    times[name].append(time.perf_counter() - start)
                    in_place[name] += hvd_herring.counters()["zero_copy_allreduces"] - zero_copy_before
            grad = next(iter(model.parameters())).grad
            if not torch.allclose(grad, torch.full_like(grad, (size + 1) / 2)):
                raise RuntimeError(f"{name}: wrong average gradient {grad.flatten()[:4]}")
            del model, step
    if rank == 0:
        base = sorted(times["ddp-gloo"])[len(times["ddp-gloo"]) // 2]
        for name, ts in times.items():
            ts.sort()
            med = ts[len(ts) // 2]
            print(f"{args.model} np={size} {name:40s} median {1000 * med:7.0f} ms  min {1000 * ts[0]:7.0f} ms  "
                  f"gloo/this {base / med:.2f}x  zero-copy allreduces per step {in_place[name] / len(ts):.1f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
