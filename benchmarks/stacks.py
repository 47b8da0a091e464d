"""How to launch each stack on the same workload, from one driver process."""

import json
import os
import socket
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)
WORKER = os.path.join(ROOT, "benchmarks", "workers", "allreduce_worker.py")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(**extra):
    env = dict(os.environ, PATH=BIN + os.pathsep + os.environ.get("PATH", ""), PYTHONUNBUFFERED="1")
    env.pop("HOROVOD_BACKEND", None)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def command(stack, np, worker_args):
    """(argv, env) that runs the worker under `stack` with np ranks on this host."""
    if stack in ("herring", "herring-ring"):
        env = _env(HOROVOD_BACKEND="herring",
                   HERRING_ALLREDUCE="ring" if stack == "herring-ring" else "herring")
        return ([os.path.join(BIN, "horovodrun"), "--gloo", "-np", str(np), "-H", f"localhost:{np}",
                 sys.executable, WORKER, "--api", "horovod"] + worker_args, env)
    if stack == "torch-gloo":
        return ([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(np),
                 "--master-addr", "127.0.0.1", "--master-port", str(_free_port()),
                 WORKER, "--api", "torch"] + worker_args, _env(OMP_NUM_THREADS=1))
    if stack == "mpi":
        return (["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(np),
                 sys.executable, WORKER, "--api", "mpi"] + worker_args, _env())
    raise ValueError(f"unknown stack {stack}")


def run(stack, np, sizes, iters=10, warmup=2, timeout=900):
    """Runs one stack; returns its JSON records (one per size)."""
    argv, env = command(stack, np, ["--sizes"] + [str(s) for s in sizes] +
                        ["--iters", str(iters), "--warmup", str(warmup), "--label", stack])
    proc = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    records = []
    for line in proc.stdout.splitlines():
        line = line.split("<stdout>:", 1)[-1].strip()
        if line.startswith("{"):
            records.append(json.loads(line))
    if proc.returncode != 0 or not records:
        raise RuntimeError(f"{stack} np={np} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return records
