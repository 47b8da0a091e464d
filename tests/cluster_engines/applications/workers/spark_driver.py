"""A Spark application on a local-cluster master (real executor JVMs and Python workers) that
trains tests/cluster_engines/applications/workers/engine_training.py's job through the launch paths Spark users have:

    python spark_driver.py OUT.json SCENARIO...   (run under HOROVOD_BACKEND=herring)

  hvd_run       horovod.spark.run(fn, num_proc=2): every rank's (rank, size, module, weights)
  hvd_run_kill  the same, rank 1's process SIGKILLs itself at step 2: the error is recorded
  hvd_elastic   horovod.spark.run_elastic(fn, num_proc=2) with hvd.elastic.run and TorchState
  hvd_elastic_kill  the same with min_num_proc=1, rank 1's process SIGKILLs itself at step 2
  td_herring    TorchDistributor(num_processes=2, local_mode=False) with backend "herring"
  td_gloo       the same with "gloo" (the peer)
  td_herring_kill  td_herring, rank 1's process SIGKILLs itself at step 2: the error is recorded
  torch_estimator  horovod.spark.torch.TorchEstimator.fit(df) and transform (spark_estimators.py)
  keras_estimator  horovod.spark.keras.KerasEstimator.fit(df) and transform (spark_estimators.py)
  keras_estimator_saved  the same with the estimator and the fitted model saved and loaded first

OUT.json maps each scenario to its result, or to {"error": message}."""

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# The executors' processes (children of the worker JVMs, which inherit this environment) import
# engine_training from here too.
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (HERE, os.environ.get("PYTHONPATH")) if p)
import engine_training  # noqa: E402
NUM_PROC = int(os.environ.get("ENGINE_TEST_NUM_PROC", "2"))


def horovod_train(kill_rank=-1, kill_step=-1):
    import signal
    import torch
    import horovod.torch as hvd
    from engine_training import LR, STEPS, data, model, weights
    hvd.init()
    m, (x, y) = model(), data()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=LR), named_parameters=m.named_parameters())
    hvd.broadcast_parameters(m.state_dict(), root_rank=0)
    xs, ys = x[hvd.rank()::hvd.size()], y[hvd.rank()::hvd.size()]
    step_times = []
    for step in range(STEPS):
        if hvd.rank() == kill_rank and step == kill_step:
            os.kill(os.getpid(), signal.SIGKILL)   # an executor's worker dies mid-training
        t0 = time.perf_counter()
        opt.zero_grad()
        torch.nn.functional.mse_loss(m(xs), ys).backward()
        opt.step()
        step_times.append(time.perf_counter() - t0)
    return {"rank": hvd.rank(), "size": hvd.size(), "module": hvd.__name__, "weights": weights(m),
            "pid": os.getpid()}


def horovod_elastic_train(kill_rank=-1, kill_step=-1, kill_marker=None, kill_host=None, error_dir=None):
    """horovod_train as an elastic job: the state is committed every step and survives resets.
    The process of rank `kill_rank`, or the one on host `kill_host`, dies at `kill_step`. With
    kill_marker (a path), only the first process to reach the kill point dies (it leaves the
    file behind): an engine that restarts workers would otherwise restart into the same kill.
    With error_dir, a rank writes the engine's error that interrupted it (hvd.elastic.run catches
    it and resets without showing it) to error_dir/engine_error.PID: the test reads what the
    survivor was told there, not in the logs Ray forwards when it gets to them."""
    import signal
    import socket
    import torch
    import horovod.torch as hvd
    from horovod.common.exceptions import HorovodInternalError
    from engine_training import LR, STEPS, data, model, weights
    hvd.init()
    m, (x, y) = model(), data()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=LR), named_parameters=m.named_parameters())
    state = hvd.elastic.TorchState(m, opt, step=0)

    @hvd.elastic.run
    def train(state):
        while state.step < STEPS:
            doomed = hvd.rank() == kill_rank or socket.gethostname() == kill_host
            if doomed and state.step == kill_step and not (kill_marker and os.path.exists(kill_marker)):
                if kill_marker:
                    open(kill_marker, "w").close()
                os.kill(os.getpid(), signal.SIGKILL)
            xs, ys = x[hvd.rank()::hvd.size()], y[hvd.rank()::hvd.size()]
            try:
                opt.zero_grad()
                torch.nn.functional.mse_loss(m(xs), ys).backward()
                opt.step()
                state.step += 1
                state.commit()   # its check for host updates broadcasts: the engine's error can come here too
            except HorovodInternalError as e:
                if error_dir:
                    with open(os.path.join(error_dir, f"engine_error.{os.getpid()}"), "a") as f:
                        f.write(f"rank {hvd.rank()}: {e}\n")
                raise

    train(state)
    return {"rank": hvd.rank(), "size": hvd.size(), "module": hvd.__name__, "weights": weights(m),
            "host": socket.gethostname()}


def ddp_train(backend, kill_rank=-1, kill_step=-1):
    import torch.distributed as dist
    from engine_training import ddp_training
    if backend == "herring":
        import hvd_herring.torch.distributed  # noqa: F401  registers the backend
    dist.init_process_group(backend)
    out = ddp_training(kill_rank, kill_step)
    dist.destroy_process_group()
    return out


def run_scenario(name, spark, work_dir):
    import horovod.spark
    if "_estimator" in name:
        import spark_estimators
        return getattr(spark_estimators, name)(spark, os.path.join(work_dir, name), NUM_PROC)
    if name == "hvd_run":
        return horovod.spark.run(horovod_train, num_proc=NUM_PROC, verbose=0, stdout=sys.stdout, stderr=sys.stderr)
    if name == "hvd_run_kill":
        return horovod.spark.run(horovod_train, kwargs={"kill_rank": 1, "kill_step": 2}, num_proc=NUM_PROC,
                                 verbose=0, stdout=sys.stdout, stderr=sys.stderr)
    if name == "hvd_elastic":
        return horovod.spark.run_elastic(horovod_elastic_train, num_proc=NUM_PROC, min_num_proc=NUM_PROC,
                                         max_num_proc=NUM_PROC, verbose=0, stdout=sys.stdout, stderr=sys.stderr)
    if name == "hvd_elastic_kill":   # rank 1 dies at step 2; the job may go on with one rank
        return horovod.spark.run_elastic(horovod_elastic_train, kwargs={"kill_rank": 1, "kill_step": 2},
                                         num_proc=NUM_PROC, min_num_proc=1, max_num_proc=NUM_PROC, verbose=0,
                                         stdout=sys.stdout, stderr=sys.stderr)
    if name.startswith("td_"):
        from pyspark.ml.torch.distributor import TorchDistributor
        backend, _, kill = name[3:].partition("_")
        kill_args = (1, 2) if kill == "kill" else ()
        return TorchDistributor(num_processes=NUM_PROC, local_mode=False, use_gpu=False).run(
            ddp_train, backend, *kill_args)
    raise ValueError(f"unknown scenario {name}")


def main():
    out_path, scenarios = sys.argv[1], sys.argv[2:]
    os.environ["PYSPARK_PYTHON"] = sys.executable      # the executors' Python workers: this venv
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master(f"local-cluster[{NUM_PROC},1,1024]").appName("hvd_herring-test")
             .config("spark.ui.enabled", "false").config("spark.task.maxFailures", os.environ.get("ENGINE_TEST_TASK_MAX_FAILURES", "1")).getOrCreate())
    out_dir = os.path.dirname(os.path.abspath(out_path))
    try:
        results = engine_training.run_scenarios("spark_driver", scenarios, lambda name: run_scenario(name, spark, out_dir))
    finally:
        spark.stop()
    engine_training.write_json(out_path, results)


if __name__ == "__main__":
    main()
