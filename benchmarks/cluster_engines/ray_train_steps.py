"""Step time of one training job under Ray Train (TorchTrainer, TorchConfig(backend=...)) with "herring" and
with "gloo", and under TorchDistributor with both, in the same run: the Ray Train rows of
docs/benchmarks_cluster_engines.md, beside spark_steps.py's.

    HERRING_IFACE=lo .venv/bin/python -m benchmarks.cluster_engines.ray_train_steps \
        [--np 2] [--steps 300] [--rounds 5] [--out benchmarks/results/cluster_engines_ray_train.json] \
        [--doc docs/benchmarks_cluster_engines.md]

Same model, rows and timing as spark_steps.py (an MLP of 2.1 M parameters, 64 rows per rank, WARMUP
untimed steps, the slowest rank's median), over 300 steps by default: Ray Train starts helper actors
of its own while the first steps run (on 2 cores the first 50 steps are slower under either
backend), and the median of 300 is the steady state's. Ray runs as docs/ray.md says: a local cluster
whose worker processes register the backend when they import torch (worker_process_setup_hook:
hvd_herring.ray.worker_setup.register_backend), 1 CPU per Ray Train worker: a worker imports torch
after Ray set OMP_NUM_THREADS for its actor, so gloo's and herring's workers alike train with the
threads Ray meant them to (recorded per rank). The four jobs take turns over --rounds rounds, with
both clusters up throughout, and the median over rounds counts: see report()'s "Why rounds"."""

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time

from benchmarks.cluster_engines.spark_steps import WARMUP, _batch, _mlp, _spark, _timed_steps, ddp_steps, summary

BEGIN, END = "<!-- ray_train:begin -->", "<!-- ray_train:end -->"
FIRST_STEPS = 50  # the start-up window reported apart: the slowest rank's median of its first timed steps


def first_steps_ms(per_rank_times):
    return summary([t[:FIRST_STEPS] for t in per_rank_times])["median_step_ms_slowest_rank"]


def ray_train_loop(config):
    """Inside a Ray Train worker: the process group is initialized; times the steps, writes them."""
    import torch
    import torch.distributed as dist
    threads_before = torch.get_num_threads()
    rank = dist.get_rank()
    model = torch.nn.parallel.DistributedDataParallel(_mlp())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    times = _timed_steps(model, opt, _batch(rank), config["steps"])
    with open(os.path.join(config["out_dir"], f"rank{rank}.json"), "w") as f:
        json.dump({"times": times, "torch_threads": torch.get_num_threads(), "torch_threads_at_start": threads_before,
                   "omp_num_threads": os.environ.get("OMP_NUM_THREADS")}, f)


def ray_train(backend, np_, steps):
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer
    work_dir = tempfile.mkdtemp(prefix=f"ray_train_steps_{backend}_")
    TorchTrainer(ray_train_loop, train_loop_config={"out_dir": work_dir, "steps": steps},
                 scaling_config=ScalingConfig(num_workers=np_, use_gpu=False),
                 torch_config=TorchConfig(backend=backend),
                 run_config=RunConfig(storage_path=work_dir, name="run")).fit()
    ranks = []
    for r in range(np_):
        with open(os.path.join(work_dir, f"rank{r}.json")) as f:
            ranks.append(json.load(f))
    shutil.rmtree(work_dir, ignore_errors=True)
    return ranks


CONFIGS = ("Ray Train gloo", "Ray Train herring", "TorchDistributor gloo", "TorchDistributor herring")


def run_config(name, np_, steps):
    """One job of `name` (a CONFIGS entry): its summary, wall time and start-up window."""
    path, backend = name.rsplit(" ", 1)
    t0 = time.time()
    if path == "Ray Train":
        ranks = ray_train(backend, np_, steps)
        times = [r["times"] for r in ranks]
        extra = dict(torch_threads=[r["torch_threads"] for r in ranks],
                     torch_threads_at_start=[r["torch_threads_at_start"] for r in ranks])
    else:
        from pyspark.ml.torch.distributor import TorchDistributor
        times = TorchDistributor(num_processes=np_, local_mode=False, use_gpu=False).run(ddp_steps, backend, steps)
        extra = {}
    return dict(summary(times), wall_seconds=time.time() - t0, first_steps_ms=first_steps_ms(times), **extra)


def combine_rounds(rounds):
    """Per configuration: the median over rounds of each round's slowest-rank median, and every round's."""
    runs = {}
    for name in CONFIGS:
        per_round = [rnd[name] for rnd in rounds]
        runs[name] = {"median_step_ms_slowest_rank": statistics.median(r["median_step_ms_slowest_rank"]
                                                                       for r in per_round),
                      "per_round_ms": [r["median_step_ms_slowest_rank"] for r in per_round],
                      "steps": per_round[0]["steps"],
                      "wall_seconds": statistics.mean(r["wall_seconds"] for r in per_round),
                      "first_steps_ms": statistics.median(r["first_steps_ms"] for r in per_round)}
    return runs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default="benchmarks/results/cluster_engines_ray_train.json")
    ap.add_argument("--doc", default="docs/benchmarks_cluster_engines.md")
    args = ap.parse_args()
    load_at_start = os.getloadavg()[0]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    import ray
    # Both clusters stay up for the whole run and the four jobs take turns, the order rotated every
    # round: a shared machine's speed drifts over tens of seconds, so jobs run one after the other
    # once each would compare moments as much as launch paths.
    ray.init(address="local", num_cpus=args.np + 1, include_dashboard=False, log_to_driver=False,
             runtime_env={"worker_process_setup_hook": "hvd_herring.ray.worker_setup.register_backend"})
    spark = _spark(args.np, "cluster-engines-bench-ray")
    rounds = []
    try:
        for i in range(args.rounds):
            order = CONFIGS[i % len(CONFIGS):] + CONFIGS[:i % len(CONFIGS)]
            rnd = {}
            for name in order:
                rnd[name] = run_config(name, args.np, args.steps)
                print(f"round {i + 1}: {name}: {rnd[name]['median_step_ms_slowest_rank']:.2f} ms/step", flush=True)
            rounds.append(rnd)
    finally:
        spark.stop()
        ray.shutdown()
    result = {"np": args.np, "model_parameters": sum(p.numel() for p in _mlp().parameters()), "rows_per_rank": 64,
              "warmup_steps": WARMUP, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
              "load_at_start": load_at_start, "rounds": rounds, "runs": combine_rounds(rounds)}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    with open(args.doc) as f:
        doc = f.read()
    section = report(result)
    if BEGIN in doc and END in doc:
        doc = doc[:doc.index(BEGIN)] + section + doc[doc.index(END) + len(END):]
    else:
        doc = doc.rstrip("\n") + "\n\n" + section + "\n"
    with open(args.doc, "w") as f:
        f.write(doc)


def rounds_table(runs):
    lines = ["| launch path | backend | median step (ms), slowest rank: median over rounds | each round | "
             "steps per round | job wall time (s), mean |", "| --- | --- | --- | --- | --- | --- |"]
    for name, run in runs.items():
        path, backend = name.rsplit(" ", 1)
        lines.append(f"| `{path}` | {backend} | {run['median_step_ms_slowest_rank']:.2f} | "
                     f"{', '.join(f'{m:.2f}' for m in run['per_round_ms'])} | {run['steps']} | "
                     f"{run['wall_seconds']:.0f} |")
    return lines


def _ratios(runs, rounds, a, b):
    """a / b from the medians over rounds, and round by round."""
    overall = runs[a]["median_step_ms_slowest_rank"] / runs[b]["median_step_ms_slowest_rank"]
    each = ", ".join(f"{rnd[a]['median_step_ms_slowest_rank'] / rnd[b]['median_step_ms_slowest_rank']:.2f}"
                     for rnd in rounds)
    return f"{a} / {b}: {overall:.2f}x (round by round: {each})"


def report(r):
    runs, rounds = r["runs"], r["rounds"]
    lines = [BEGIN, "## Ray Train beside TorchDistributor", "",
             f"One run of `benchmarks/cluster_engines/ray_train_steps.py` on {r['date']} (CPU {r['cpu']}, "
             f"{r['cores']} cores shared with other work, load {r['load_at_start']:.1f} at the start), "
             f"{len(rounds)} rounds: in each, four jobs one after the other, the order rotated every round: Ray "
             f"Train's `TorchTrainer` ({r['np']} workers of 1 CPU on a local Ray cluster, the backend registered "
             "through `worker_process_setup_hook` as docs/ray.md says) with `gloo` and `herring`, and "
             f"`TorchDistributor` (`local-cluster[{r['np']},1,1024]`) with both; the Ray cluster and the Spark "
             f"application stay up for the whole run. Same job as above ({r['model_parameters'] / 1e6:.1f} M "
             f"parameters, {r['rows_per_rank']} rows per rank, {r['warmup_steps']} warm-up steps, then "
             f"{runs['Ray Train herring']['steps']} timed); a round's figure is the slowest rank's median step, "
             "the table gives the median over rounds and each round's; raw numbers in "
             "benchmarks/results/cluster_engines_ray_train.json.", "",
             *rounds_table(runs), "",
             _ratios(runs, rounds, "Ray Train herring", "TorchDistributor herring") + "; "
             + _ratios(runs, rounds, "Ray Train herring", "Ray Train gloo")
             + " (issue 64 asks for at most 1.2x and under 1x).", "",
             "Why rounds: this machine's speed drifts over tens of seconds (a shared 2-core VM). In one "
             "3000-step TorchDistributor herring job the median of each 100-step window ranged from 14.4 to "
             "22.8 ms, and three runs of one job per configuration (2026-12-07 22:05-22:13 UTC) measured "
             "TorchDistributor herring at 22.51, 21.29 and 14.67 ms beside Ray Train herring at 24.59, 22.24 "
             "and 21.25. In steady steps the CPU goes to the same places under both launchers (15 s sampled "
             "from /proc): the two ranks' training threads 25.2 CPU-s under Ray Train and 25.8 under "
             "TorchDistributor, herring's loop threads 2.1 and 2.3, Ray's own processes (raylet, GCS, the Train "
             "controller and helper actors) 1.0 in all.", "",
             f"Over each job's first {FIRST_STEPS} timed steps (slowest rank's median, ms; median over rounds): "
             + ", ".join(f"{name} {run['first_steps_ms']:.2f}" for name, run in runs.items())
             + ". Ray Train starts helper actors of its own (a dataset manager, a synchronization actor) while "
             "the first steps run, under either backend. Until issue 64 the setup hook imported torch in every "
             "process Ray started (about 3.5 s of CPU each): the first 150 steps then took 44 ms instead of 18-20 "
             "on herring; hvd_herring.ray.worker_setup.register_backend registers the backend when a process "
             "imports torch instead (docs/ray.md). Torch threads at the start of the training function, gloo: "
             f"{rounds[0]['Ray Train gloo']['torch_threads_at_start']}, herring: "
             f"{rounds[0]['Ray Train herring']['torch_threads_at_start']} (Ray's OMP_NUM_THREADS: 1 per worker). "
             "The job wall time includes Ray Train starting its controller and workers (or Spark its barrier "
             "stage).", END]
    return "\n".join(lines)


if __name__ == "__main__":
    main()


def rewrite_doc(out="benchmarks/results/cluster_engines_ray_train.json", doc="docs/benchmarks_cluster_engines.md"):
    """The doc's section again from the results file (no run)."""
    with open(out) as f:
        result = json.load(f)
    with open(doc) as f:
        text = f.read()
    text = text[:text.index(BEGIN)] + report(result) + text[text.index(END) + len(END):]
    with open(doc, "w") as f:
        f.write(text)
