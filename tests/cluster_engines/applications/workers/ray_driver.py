"""A Ray application on a local Ray cluster that trains tests/cluster_engines/applications/workers/engine_training.py's job
through the launch paths Ray users have:

    python ray_driver.py OUT.json SCENARIO...   (run under HOROVOD_BACKEND=herring)

  exec           horovod.ray.RayExecutor(num_workers=2).run(fn): every rank's result
  exec_kill      the same, rank 1's actor process SIGKILLs itself at step 2: the error is recorded
  elastic        horovod.ray.ElasticRayExecutor (min 2 = max 2 workers) running hvd.elastic.run with
                 TorchState: every rank's result
  elastic_kill   the same with min 1 worker, rank 1's actor process SIGKILLs itself at step 2 (once):
                 on this one-host cluster Horovod blacklists the host and ends the job: the error
  elastic_kill_host  on a Ray cluster of two hosts (ENGINE_TEST_RAY_ADDRESS, tests/cluster_engines/applications/test_ray.py's
                 simulated hosts), min 1 worker, the actor on host ENGINE_TEST_KILL_HOST SIGKILLs
                 itself at step 2: the survivors' results
  setup_hook     a Ray task that uses no torch: whether its worker process imported torch (the
                 setup hook must not) and whether the hook waits for torch's import to register
  train_herring  Ray Train TorchTrainer with TorchConfig(backend="herring"): every rank's weights
  train_gloo     the same with "gloo" (the peer)

OUT.json maps each scenario to its result, or to {"error": message}, and to the engine's errors the
ranks of an elastic scenario were interrupted by ("engine_errors")."""

import functools
import glob
import json
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# Ray's workers (children of the raylet, which inherits this environment) import engine_training too.
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (HERE, os.environ.get("PYTHONPATH")) if p)
import engine_training  # noqa: E402
from spark_driver import horovod_elastic_train, horovod_train  # noqa: E402  the same training functions

NUM_PROC = int(os.environ.get("ENGINE_TEST_NUM_PROC", "2"))


def ray_train_loop(config):
    from engine_training import ddp_training, write_json
    import torch
    out = ddp_training()
    # torch's intra-op threads against Ray's OMP_NUM_THREADS for this actor (the test checks they agree).
    out.update(torch_threads=torch.get_num_threads(), omp_num_threads=os.environ.get("OMP_NUM_THREADS"))
    write_json(os.path.join(config["out_dir"], f"rank{out['rank']}.json"), out)


def run_scenario(name, work_dir):
    if name in ("exec", "exec_kill"):
        from horovod.ray import RayExecutor
        kwargs = {"kill_rank": 1, "kill_step": 2} if name == "exec_kill" else {}
        executor = RayExecutor(RayExecutor.create_settings(timeout_s=120), num_workers=NUM_PROC, cpus_per_worker=1)
        executor.start()
        try:
            return executor.run(horovod_train, kwargs=kwargs)
        finally:
            executor.shutdown()
    if name in ("elastic", "elastic_kill", "elastic_kill_host"):
        from horovod.ray import ElasticRayExecutor
        # Who dies at step 2 (once): nobody, rank 1, or the actor on a named host.
        kill = {"elastic": {}, "elastic_kill": {"kill_rank": 1},
                "elastic_kill_host": {"kill_host": os.environ.get("ENGINE_TEST_KILL_HOST")}}[name]
        # On one machine loopback is the one interface the actors share; across the simulated
        # hosts, eth0 (Horovod's NIC detection would otherwise probe every interface).
        nics = {"eth0"} if name == "elastic_kill_host" else {"lo"}
        settings = ElasticRayExecutor.create_settings(min_num_proc=1 if kill else NUM_PROC, max_num_proc=NUM_PROC,
                                                      elastic_timeout=300, timeout_s=120, nics=nics)
        executor = ElasticRayExecutor(settings, cpus_per_slot=1)
        executor.start()
        kwargs = dict(kill, kill_step=2, kill_marker=os.path.join(work_dir, "killed"), error_dir=work_dir) \
            if kill else {}
        return executor.run(functools.partial(horovod_elastic_train, **kwargs))   # run() takes no kwargs
    if name == "setup_hook":
        import ray

        @ray.remote
        def probe():
            from hvd_herring.ray.worker_setup import _RegisterAfterTorchImport
            return {"torch_imported": "torch" in sys.modules,
                    "waits_for_torch": any(isinstance(f, _RegisterAfterTorchImport) for f in sys.meta_path)}
        return ray.get(probe.remote())
    if name.startswith("train_"):
        from ray.train import RunConfig, ScalingConfig
        from ray.train.torch import TorchConfig, TorchTrainer
        trainer = TorchTrainer(ray_train_loop, train_loop_config={"out_dir": work_dir},
                               scaling_config=ScalingConfig(num_workers=NUM_PROC, use_gpu=False),
                               torch_config=TorchConfig(backend=name[len("train_"):]),
                               run_config=RunConfig(storage_path=work_dir, name="run"))
        trainer.fit()
        ranks = []
        for path in sorted(glob.glob(os.path.join(work_dir, "rank*.json"))):
            with open(path) as f:
                ranks.append(json.load(f))
        return ranks
    raise ValueError(f"unknown scenario {name}")


def engine_errors(work_dir):
    """The engine's errors the ranks of an elastic scenario caught (horovod_elastic_train's error_dir)."""
    errors = []
    for path in sorted(glob.glob(os.path.join(work_dir, "engine_error.*"))):
        with open(path) as f:
            errors += f.read().splitlines()
    return errors


def main():
    out_path, scenarios = sys.argv[1], sys.argv[2:]
    import ray
    # Ray Train calls init_process_group before the training function runs: every worker process
    # registers the "herring" backend when it imports torch (docs/ray.md).
    # address="local": a cluster of its own, even where another Ray cluster on the machine left
    # /tmp/ray/ray_current_cluster behind (ray.init() would connect to that one).
    # ENGINE_TEST_RAY_ADDRESS: a running cluster to join instead (its nodes bring their CPUs).
    address = os.environ.get("ENGINE_TEST_RAY_ADDRESS")
    own = {} if address else {"num_cpus": NUM_PROC + 1, "include_dashboard": False}
    ray.init(address=address or "local", log_to_driver=True,
             runtime_env={"worker_process_setup_hook": "hvd_herring.ray.worker_setup.register_backend"}, **own)
    work_dirs = {}

    def run(name):
        work_dirs[name] = tempfile.mkdtemp(prefix=f"ray_{name}_")
        return run_scenario(name, work_dirs[name])

    def finish(name, entry):
        if name in work_dirs:
            entry["engine_errors"] = engine_errors(work_dirs[name])
            shutil.rmtree(work_dirs[name], ignore_errors=True)

    try:
        results = engine_training.run_scenarios("ray_driver", scenarios, run, finish)
    finally:
        ray.shutdown()
    engine_training.write_json(out_path, results)


if __name__ == "__main__":
    main()
