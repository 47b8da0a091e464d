"""The one training job every cluster-engine test runs (tests/cluster_engines/applications/test_spark.py, tests/cluster_engines/applications/test_ray.py):
a linear model, full-batch SGD, rank r trains on rows r::size. With equal shards the averaged
gradient equals the full batch's, so a single process training on all rows is the reference.
Imported by the test drivers in their own processes (which also run their scenarios through
run_scenarios); the executors get the functions pickled."""

import json
import time

FEATURES, ROWS, STEPS, LR = 8, 48, 6, 0.1


def data():
    import torch
    g = torch.Generator().manual_seed(1)
    x = torch.randn(ROWS, FEATURES, generator=g)
    return x, x.sum(1, keepdim=True) * 0.5 + 1.0


def model():
    import torch
    torch.manual_seed(0)
    return torch.nn.Linear(FEATURES, 1)


def weights(m):
    return [v for p in m.parameters() for v in p.detach().flatten().tolist()]


def reference_weights():
    """Single process, all rows."""
    import torch
    m, (x, y) = model(), data()
    opt = torch.optim.SGD(m.parameters(), lr=LR)
    for _ in range(STEPS):
        opt.zero_grad()
        torch.nn.functional.mse_loss(m(x), y).backward()
        opt.step()
    return weights(m)


def ddp_training(kill_rank=-1, kill_step=-1):
    """Trains the model under DistributedDataParallel over the default process group (initialized by
    the caller) on this rank's rows; rank kill_rank SIGKILLs itself at step kill_step. Returns
    {"rank", "size", "backend", "weights"}."""
    import os
    import signal
    import torch
    import torch.distributed as dist
    rank, size = dist.get_rank(), dist.get_world_size()
    m, (x, y) = model(), data()
    ddp = torch.nn.parallel.DistributedDataParallel(m)
    opt = torch.optim.SGD(ddp.parameters(), lr=LR)
    xs, ys = x[rank::size], y[rank::size]
    for step in range(STEPS):
        if rank == kill_rank and step == kill_step:
            os.kill(os.getpid(), signal.SIGKILL)
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp(xs), ys).backward()
        opt.step()
    return {"rank": rank, "size": size, "backend": dist.get_backend(), "weights": weights(m)}


def write_json(path, value):
    with open(path, "w") as f:
        json.dump(value, f)


def run_scenarios(driver, names, run, finish=None):
    """{name: {"result": run(name)} or {"error": "Type: message"}} for each scenario (the tests
    judge the message), with what finish(name, entry) adds and the seconds it took, each said as
    it ends."""
    results = {}
    for name in names:
        t0 = time.time()
        try:
            results[name] = {"result": run(name)}
        except Exception as e:  # the test judges the message
            results[name] = {"error": f"{type(e).__name__}: {e}"}
        if finish is not None:
            finish(name, results[name])
        results[name]["seconds"] = time.time() - t0
        print(f"[{driver}] {name}: {time.time() - t0:.1f} s", flush=True)
    return results
