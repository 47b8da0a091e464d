"""Step time of one training job under Spark's launch paths, in the same run: TorchDistributor with
"gloo" and with "herring" and horovod.spark.run with herring, in one Spark application, then
horovod.spark.run with stock Horovod-gloo (the peer of benchmarks/peers, with pyspark:
benchmarks/peers/setup_horovod_spark.sh) in a Spark application of the peer's own environment.

    HOROVOD_BACKEND=herring HERRING_IFACE=lo .venv/bin/python -m benchmarks.cluster_engines.spark_steps \
        [--np 2] [--steps 40] [--no-peer] [--out benchmarks/results/cluster_engines.json] \
        [--doc docs/benchmarks_cluster_engines.md]

The model is an MLP of 2.1 M parameters (8.0 MiB of float32 gradients), 64 rows per rank per step;
each rank times its steps after WARMUP ones, and the slowest rank's median counts."""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PEER_SETUP = os.path.join(ROOT, "benchmarks", "peers", "setup_horovod_spark.sh")
PEER_RESULT = "PEER_RESULT "  # the line the peer's run prints its summary on

WARMUP = 5


def _mlp():
    import torch
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 512),
                               torch.nn.ReLU(), torch.nn.Linear(512, 10))


def _batch(rank):
    import torch
    g = torch.Generator().manual_seed(100 + rank)
    return torch.randn(64, 512, generator=g), torch.randint(0, 10, (64,), generator=g)


def _timed_steps(model, opt, batch, steps):
    """The times of `steps` training steps on `batch`, after WARMUP untimed ones (run the same way)."""
    import torch
    x, y = batch
    times = []
    for _ in range(WARMUP + steps):
        t0 = time.perf_counter()
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    return times[WARMUP:]


def ddp_steps(backend, steps):
    import torch
    import torch.distributed as dist
    if backend == "herring":
        import hvd_herring.torch.distributed  # noqa: F401
    dist.init_process_group(backend)
    rank = dist.get_rank()
    model = torch.nn.parallel.DistributedDataParallel(_mlp())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    times = _timed_steps(model, opt, _batch(rank), steps)
    all_times = [None] * dist.get_world_size()
    dist.all_gather_object(all_times, times)
    dist.destroy_process_group()
    return all_times


def horovod_steps(steps):
    import torch
    import horovod.torch as hvd
    hvd.init()
    model = _mlp()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    return _timed_steps(model, opt, _batch(hvd.rank()), steps)


def summary(per_rank):
    medians = [statistics.median(t) for t in per_rank]
    return {"median_step_ms_slowest_rank": max(medians) * 1e3, "median_step_ms_per_rank": [m * 1e3 for m in medians],
            "steps": len(per_rank[0])}


def _spark(np_, name):
    from pyspark.sql import SparkSession
    return (SparkSession.builder.master(f"local-cluster[{np_},1,1024]").appName(name)
            .config("spark.ui.enabled", "false").getOrCreate())


def peer_run(np_, steps):
    """Inside the peer's environment (stock Horovod, no switch): horovod.spark.run with gloo."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    import horovod.spark
    spark = _spark(np_, "cluster-engines-bench-peer")
    try:
        t0 = time.time()
        per_rank = horovod.spark.run(horovod_steps, args=(steps,), num_proc=np_, verbose=0)
        print(PEER_RESULT + json.dumps(dict(summary(per_rank), wall_seconds=time.time() - t0)), flush=True)
    finally:
        spark.stop()


def launch_peer(np_, steps):
    """horovod.spark.run with Horovod-gloo, in a Spark application of the peer's environment."""
    python = subprocess.run(["bash", PEER_SETUP], check=True, capture_output=True, text=True).stdout.split()[-1]
    env = {k: v for k, v in os.environ.items() if k not in ("HOROVOD_BACKEND", "PYSPARK_PYTHON")}
    env["PYTHONPATH"] = ROOT  # this module, not the project's package: the peer has no hvd_herring
    out = subprocess.run([python, "-m", "benchmarks.cluster_engines.spark_steps", "--peer-run", "--np", str(np_),
                          "--steps", str(steps)], cwd=ROOT, env=env, check=True, capture_output=True, text=True,
                         timeout=1800).stdout
    return json.loads(next(line for line in out.splitlines() if line.startswith(PEER_RESULT))[len(PEER_RESULT):])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--out", default="benchmarks/results/cluster_engines.json")
    ap.add_argument("--doc", default="docs/benchmarks_cluster_engines.md")
    ap.add_argument("--no-peer", action="store_true", help="skip horovod.spark.run with Horovod-gloo")
    ap.add_argument("--peer-run", action="store_true", help=argparse.SUPPRESS)  # inside the peer's environment
    args = ap.parse_args()
    if args.peer_run:
        peer_run(args.np, args.steps)
        return
    if os.environ.get("HOROVOD_BACKEND", "").lower() != "herring":
        sys.exit("run under HOROVOD_BACKEND=herring (horovod.spark.run's check reads it at start-up)")
    load_at_start = os.getloadavg()[0]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.ml.torch.distributor import TorchDistributor
    import horovod.spark
    spark = _spark(args.np, "cluster-engines-bench")
    runs = {}
    try:
        for name in ("TorchDistributor gloo", "TorchDistributor herring", "horovod.spark.run herring"):
            t0 = time.time()
            if name.startswith("TorchDistributor"):
                per_rank = TorchDistributor(num_processes=args.np, local_mode=False, use_gpu=False).run(
                    ddp_steps, name.split()[-1], args.steps)
            else:
                per_rank = horovod.spark.run(horovod_steps, args=(args.steps,), num_proc=args.np, verbose=0)
            runs[name] = dict(summary(per_rank), wall_seconds=time.time() - t0)
            print(f"{name}: {runs[name]['median_step_ms_slowest_rank']:.2f} ms/step "
                  f"(job {runs[name]['wall_seconds']:.0f} s)", flush=True)
    finally:
        spark.stop()
    if not args.no_peer:
        name = "horovod.spark.run Horovod-gloo"
        runs[name] = launch_peer(args.np, args.steps)
        print(f"{name}: {runs[name]['median_step_ms_slowest_rank']:.2f} ms/step "
              f"(job {runs[name]['wall_seconds']:.0f} s)", flush=True)
    result = {"np": args.np, "model_parameters": sum(p.numel() for p in _mlp().parameters()),
              "rows_per_rank": 64, "warmup_steps": WARMUP, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "cpu": platform.processor() or platform.machine(), "load_at_start": load_at_start, "runs": runs}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    ray_section = ""   # ray_train_steps.py's rows, kept when this table is rewritten
    if os.path.exists(args.doc):
        with open(args.doc) as f:
            old = f.read()
        if "<!-- ray_train:begin -->" in old:
            ray_section = "\n" + old[old.index("<!-- ray_train:begin -->"):]
    with open(args.doc, "w") as f:
        f.write(report(result) + ray_section)


def step_table(runs):
    """The markdown table of runs ({"<launch path> <backend>": summary(...) + steps, wall_seconds})."""
    lines = ["| launch path | backend | median step (ms), slowest rank | per rank | steps | job wall time (s) |",
             "| --- | --- | --- | --- | --- | --- |"]
    for name, run in runs.items():
        path, backend = name.rsplit(" ", 1)
        per_rank = ", ".join(f"{m:.2f}" for m in run["median_step_ms_per_rank"])
        lines.append(f"| `{path}` | {backend} | {run['median_step_ms_slowest_rank']:.2f} | {per_rank} | "
                     f"{run['steps']} | {run['wall_seconds']:.0f} |")
    return lines


def report(r):
    lines = ["# Training under Spark's launch paths: step time", "",
             f"One Spark application (`local-cluster[{r['np']},1,1024]`: {r['np']} executor JVMs with their own "
             f"Python workers) ran the same job three ways, one after the other, then one of the same shape in the "
             f"peer's environment ran it under stock Horovod-gloo (where measured), on {r['date']} "
             f"(CPU {r['cpu']}, 2 cores shared with other work, load {r['load_at_start']:.1f} at the start). "
             f"Model: an MLP of {r['model_parameters'] / 1e6:.1f} M parameters, {r['rows_per_rank']} rows per rank "
             f"per step, SGD; each rank timed its steps after {r['warmup_steps']} warm-up steps; the table gives "
             "the slowest rank's median. Made by `benchmarks/cluster_engines/spark_steps.py` "
             "(command in its docstring; raw numbers in benchmarks/results/cluster_engines.json).", "",
             *step_table(r["runs"])]
    lines += ["", "The job wall time includes Spark scheduling the barrier stage, torchrun (TorchDistributor) or "
              "Horovod's driver and task services (horovod.spark.run), process start and imports.",
              "Horovod-gloo is the peer of benchmarks/peers (Horovod 0.28.1 built with PyTorch and gloo) with "
              "pyspark added (benchmarks/peers/setup_horovod_spark.sh); its Spark application starts after "
              "the others end.",
              "One run, no repeats, on a machine whose load (other jobs) is given above: the figures compare "
              "the four runs within this run, and are indicative beyond it.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
