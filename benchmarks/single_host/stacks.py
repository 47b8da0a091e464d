"""The stacks compared, and how to launch one of them on this host with N ranks running the
benchmark worker. Each launch is its own process tree with a deadline: a stack that fails or hangs
is reported as failed (with its error) and the run goes on.

    herring       Horovod's torch API on the herring engine (HOROVOD_BACKEND=herring), PS allreduce
    herring-ring  the same with HERRING_ALLREDUCE=ring
    herring-zero-copy  herring with the buffers in zero-copy memory (hvd.zero_copy_empty)
    torch-gloo    torch.distributed, gloo backend, DistributedDataParallel for models (torchrun)
    ddp-herring   the same torch.distributed code on backend "herring" (hvd_herring.torch.distributed)
    horovod-gloo  stock Horovod 0.28.1 built with PyTorch and gloo, from its cached environment
    mpi           Open MPI's MPI_Allreduce through mpi4py (mpirun)
    deepspeed-shm DeepSpeed's shared-memory CPU allreduce (deepspeed.comm.inference_all_reduce),
                  launched by DeepSpeed's own single-node launcher; allreduce workloads only"""

import base64
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

from benchmarks.common import deepspeed_env, peer_env
from benchmarks.common.paths import ROOT, WORKERS_DIR
from benchmarks.common.stack_env import free_port, scrubbed_env
from benchmarks.common.worker_records import read_records

BIN = os.path.dirname(sys.executable)
WORKER = os.path.join(WORKERS_DIR, "bench_worker.py")


@dataclass
class Stack:
    name: str
    api: str                      # the worker's --api
    launcher: str                 # horovodrun | horovodrun-peer | torchrun | mpirun | deepspeed
    env: dict = field(default_factory=dict)
    variants: dict = field(default_factory=dict)   # variant name -> extra environment
    description: str = ""


CACHE_OFF = {"cache-off": {"HOROVOD_CACHE_CAPACITY": "0"}}
# The engine's first-round latency path, for a before/after in one run: bit vectors through rank 0
# over TCP, and no one-step shared-memory path for small collectives.
TCP_CONTROL = {"tcp-control": {"HERRING_CONTROL_PLANE": "tcp", "HERRING_SMALL_MESSAGE_BYTES": "0"}}
# Every cycle on the engine's loop thread (the waiter wakes it and sleeps until it is done), for a
# before/after of HERRING_CALLER_RUNS_CYCLES in one run.
LOOP_ONLY = {"loop-only": {"HERRING_CALLER_RUNS_CYCLES": "0"}}
# DDP with gradient_as_bucket_view=True: the gradients live in the buckets, which saves DDP's copy
# of every gradient into its bucket and back (the same for every backend).
BUCKET_VIEW = {"bucket-view": {"HERRING_BENCH_DDP_BUCKET_VIEW": "1"}}
# The DDP setting the README recommends on herring: the bucket view, and the engine averaging as it
# writes the result (hvd_herring.torch.distributed.average_hook) instead of DDP's division pass.
AVERAGE_HOOK = {"bucket-view-average-hook": {"HERRING_BENCH_DDP_BUCKET_VIEW": "1",
                                             "HERRING_BENCH_DDP_AVERAGE_HOOK": "1"}}

STACKS = {s.name: s for s in [
    Stack("herring", "horovod", "horovodrun", {"HOROVOD_BACKEND": "herring", "HERRING_ALLREDUCE": "herring"},
          dict(CACHE_OFF, **TCP_CONTROL, **LOOP_ONLY), "Horovod's torch API on the herring engine (HOROVOD_BACKEND=herring): parameter-server "
          "allreduce (shared-memory reduce-scatter, server shards, shared-memory all-gather); "
          "launched by horovodrun --gloo"),
    Stack("herring-ring", "horovod", "horovodrun", {"HOROVOD_BACKEND": "herring", "HERRING_ALLREDUCE": "ring"},
          {}, "the same engine with HERRING_ALLREDUCE=ring (TCP ring reduce-scatter + all-gather)"),
    Stack("herring-zero-copy", "horovod", "horovodrun",
          {"HOROVOD_BACKEND": "herring", "HERRING_ALLREDUCE": "herring", "HERRING_BENCH_ZERO_COPY": "1"},
          {}, "the same engine with the buffers in zero-copy memory (hvd.zero_copy_empty; for models, "
          "hvd.zero_copy_gradients): on one host the ranks sum each unit straight out of every rank's "
          "buffer into every rank's buffer (no staging)"),
    Stack("torch-gloo", "torch", "torchrun", {},
          BUCKET_VIEW, "torch.distributed with the gloo backend (torchrun); models wrapped in torch's own "
          "DistributedDataParallel with its defaults (25 MiB buckets, first bucket 1 MiB)"),
    Stack("ddp-herring", "torch", "torchrun", {"HERRING_BENCH_TORCH_BACKEND": "herring"},
          dict(BUCKET_VIEW, **AVERAGE_HOOK), "the torch-gloo stack's code (torch.distributed, DistributedDataParallel with its defaults) "
          "with init_process_group(\"herring\"): every collective on the herring engine (torchrun)"),
    Stack("horovod-gloo", "horovod", "horovodrun-peer", {},
          CACHE_OFF, "stock Horovod 0.28.1 built with PyTorch and gloo (CPU operations gloo), in its own "
          "cached environment; launched by its own horovodrun --gloo"),
    Stack("mpi", "mpi", "mpirun", {},
          {}, "Open MPI's MPI_Allreduce / MPI_Iallreduce through mpi4py (mpirun --bind-to none --oversubscribe)"),
    Stack("deepspeed-shm", "deepspeed", "deepspeed", {"DS_ACCELERATOR": "cpu"},
          {}, "DeepSpeed " + deepspeed_env.VERSION + "'s shared-memory CPU allreduce: "
          "`deepspeed.comm.inference_all_reduce` on its `deepspeed_shm_comm` op (ShareMemCommBuilder, built "
          "once by benchmarks/peers/setup_deepspeed.sh) after `deepspeed.comm.init_distributed` on the CPU "
          "accelerator (gloo group for set-up, barriers and the timing max); fp32, in place; launched by "
          "DeepSpeed's single-node launcher (`python -m deepspeed.launcher.launch`, which sets LOCAL_SIZE); "
          "OMP_NUM_THREADS=1 like every stack. Allreduce workloads only"),
]}

# Knobs of the stacks under test that a caller's environment must not leak into a launch: each
# stack runs with its own defaults unless the plan says otherwise.
_SCRUBBED_PREFIXES = ("HOROVOD_", "HERRING_", "OMPI_", "PMIX_", "MASTER_", "TORCHELASTIC_", "DS_", "LOCAL_SIZE")
_KEPT = ("HERRING_BENCH_CACHE", "HERRING_BENCH_COLLECTIVE_TIMEOUT")


def _base_env(bin_dir):
    return scrubbed_env(bin_dir, _SCRUBBED_PREFIXES, _KEPT)


def available(name):
    """(True, "") or (False, why not)."""
    stack = STACKS[name]
    if stack.launcher == "horovodrun-peer" and not os.access(peer_env.python(), os.X_OK):
        return False, (f"the Horovod-with-PyTorch environment is missing ({peer_env.cache_dir()}); "
                       f"build it with: bash {os.path.relpath(peer_env.SETUP_SCRIPT, ROOT)}")
    if stack.launcher == "deepspeed":
        ok, why = deepspeed_env.ready()
        if not ok:
            return False, why
    if stack.launcher == "mpirun" and not _which("mpirun"):
        return False, "mpirun is not installed (apt-get install openmpi-bin libopenmpi-dev)"
    return True, ""


def _which(cmd):
    return any(os.access(os.path.join(d, cmd), os.X_OK) for d in os.environ.get("PATH", "").split(os.pathsep))


def command(name, np, worker_args, variant=None, extra_env=None):
    """(argv, env) that runs the worker under stack `name` with np ranks on this host; extra_env
    (e.g. a herring knob being tuned) goes on top of the stack's own settings."""
    stack = STACKS[name]
    extra = dict(stack.env, **(stack.variants[variant] if variant else {}), **(extra_env or {}))
    if stack.launcher == "horovodrun":
        env = _base_env(BIN)
        argv = [os.path.join(BIN, "horovodrun"), "--gloo", "-np", str(np), "-H", f"localhost:{np}",
                sys.executable, WORKER]
    elif stack.launcher == "horovodrun-peer":
        env = _base_env(peer_env.bin_dir())
        argv = [os.path.join(peer_env.bin_dir(), "horovodrun"), "--gloo", "-np", str(np), "-H", f"localhost:{np}",
                peer_env.python(), WORKER]
    elif stack.launcher == "torchrun":
        env = _base_env(BIN)
        argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", str(np),
                "--master-addr", "127.0.0.1", "--master-port", str(free_port()), WORKER]
    elif stack.launcher == "mpirun":
        env = _base_env(BIN)
        argv = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", str(np),
                sys.executable, WORKER]
    elif stack.launcher == "deepspeed":
        # What the `deepspeed` command runs for one node: its launch module with every local rank
        # in world_info. It sets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR/PORT and LOCAL_SIZE,
        # which the shm op needs to know that every rank is local.
        env = _base_env(BIN)
        env.update(TORCH_EXTENSIONS_DIR=deepspeed_env.extensions_dir())   # the op built by the peer set-up
        world_info = base64.urlsafe_b64encode(json.dumps({"localhost": list(range(np))}).encode()).decode()
        argv = [sys.executable, "-u", "-m", "deepspeed.launcher.launch", f"--world_info={world_info}",
                "--master_addr=127.0.0.1", f"--master_port={free_port()}", "--no_local_rank", WORKER]
    else:
        raise ValueError(f"unknown launcher {stack.launcher}")
    env.update(extra)
    return argv + ["--api", stack.api] + list(worker_args), env


@dataclass
class Launch:
    stack: str
    variant: str
    np: int
    workloads: list
    records: list
    errors: list                  # error records written by failing ranks
    returncode: int
    seconds: float
    output_tail: str
    timed_out: bool
    error_lines: list = field(default_factory=list)   # the ranks' own error messages, deduplicated
    core_round_trip_ns: list = field(default_factory=list)   # [before, after] (run.run_launch)

    @property
    def ok(self):
        return self.returncode == 0 and not self.errors and not self.timed_out


_ERROR = re.compile(r"\b[A-Za-z_.]*(Error|Exception|Timeout)\b: ")
_PREFIX = re.compile(r"^(\[\d+(,\d+)?\]<std(out|err)>:|\[(default)?rank\d+\]:)\s*")
# What launchers say about a failed rank, which is not the rank's error itself.
_LAUNCHER_NOISE = ("Horovod detected that one or more processes exited", "ChildFailedError")


def error_lines(text, limit=5):
    """The distinct exception lines the ranks printed, without launcher prefixes."""
    out = []
    for line in text.splitlines():
        line = _PREFIX.sub("", line).strip()
        if _ERROR.search(line) and not any(n in line for n in _LAUNCHER_NOISE) and line not in out:
            out.append(line[:500])
    return out[:limit]


def _kill_tree(proc):
    """Ends the launcher and every process it started (by PID), TERM first, then KILL."""
    try:
        import psutil
        children = psutil.Process(proc.pid).children(recursive=True)
    except Exception:
        children = []
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in [proc] + children:
            try:
                os.kill(p.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(_alive(p.pid) for p in [proc] + children):
            time.sleep(0.1)
    proc.wait()


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped) counts as gone.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def launch(name, np, workloads, variant=None, timeout=600, log=None, extra_env=None):
    """Runs `workloads` (list of worker specs, each with an "id") under one stack; never raises for
    a failing stack: the Launch says what happened."""
    with tempfile.TemporaryDirectory(prefix="herring-bench-") as tmp:
        plan_path, out_path = os.path.join(tmp, "plan.json"), os.path.join(tmp, "out.jsonl")
        with open(plan_path, "w") as f:
            json.dump({"workloads": workloads}, f)
        argv, env = command(name, np, ["--plan", plan_path, "--out", out_path], variant, extra_env)
        start = time.monotonic()
        timed_out = False
        with open(os.path.join(tmp, "output.txt"), "w+") as output:
            proc = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=output, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
                _kill_tree(proc)
            output.seek(0)
            text = output.read()
        seconds = time.monotonic() - start
        records, errors = read_records(out_path)
    if log is not None and (timed_out or proc.returncode != 0):
        log.write(f"===== {name}{' (' + variant + ')' if variant else ''} np={np}: "
                  f"{'timed out' if timed_out else 'exit status ' + str(proc.returncode)}\n{text}\n")
    tail = "\n".join(text.strip().splitlines()[-25:])
    if timed_out:
        tail = f"(killed after the {timeout} s deadline)\n" + tail
    for rec in records + errors:
        rec.update(stack=name, variant=variant or "")
    return Launch(name, variant or "", np, [w["id"] for w in workloads], records, errors,
                  proc.returncode, seconds, tail, timed_out, error_lines(text))
