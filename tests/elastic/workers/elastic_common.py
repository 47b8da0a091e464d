"""What the elastic-worker tests share between the workers (torch, TensorFlow) and the test that
checks them: the scenarios (what happens at which step), the data each rank trains on at a step,
the per-worker event log, and the discovery file that the workers rewrite to add or remove hosts.

Numpy only: the test process imports this without a framework or the herring switch."""

import json
import os
import signal
import socket
import time

import numpy as np

# Distinct names of this one machine: horovodrun's driver sees each as its own host (and runs
# its workers locally, since each resolves to a local address). In the simulated cluster they
# are the names of its hosts instead (HERRING_TEST_HOST_A/B/C), reached over ssh.
HOST_A = os.environ.get("HERRING_TEST_HOST_A", "localhost")
HOST_B = os.environ.get("HERRING_TEST_HOST_B", "127.0.0.1")

IN_FEATURES = 6
BATCH = 4
LR = 0.05
MOMENTUM = 0.9
STEPS = 24

# scenario -> {step: action}. An action runs once (a marker file records it) at the start of the
# step; "expect" then holds every rank in a commit loop (no training) until the driver's next
# round has that many workers, so that the change lands at that step however slow the machine.
#   hosts:  rank 0 rewrites the discovery output
#   fail:   the worker on (host, local_rank), or ("rank", r), raises ("raise") or kills itself
#           ("kill") mid-step, after its forward pass, while the others are in the gradient allreduce
SCENARIOS = {
    # 2 workers on A; B joins (4); A is removed (2 on B).
    "add_remove": {
        5: {"hosts": [f"{HOST_A}:2", f"{HOST_B}:2"], "expect": 4},
        12: {"hosts": [f"{HOST_B}:2"], "expect": 2},
    },
    # 4 workers on A and B; B's local rank 1 raises: B is blacklisted, 2 survivors on A; then a
    # replacement host C joins (4).
    "raise_then_replace": {
        6: {"fail": ("raise", HOST_B, 1), "expect": 2},
        10: {"hosts": [f"{HOST_A}:2", f"{HOST_B}:2", "{HOST_C}:2"], "expect": 4},
    },
    # The same failure by SIGKILL, and no replacement: training ends on the 2 survivors.
    "kill_no_replacement": {
        6: {"fail": ("kill", HOST_B, 0), "expect": 2},
    },
    # SIGKILL of rank 0's host-mate with a replacement.
    "kill_then_replace": {
        6: {"fail": ("kill", HOST_A, 1), "expect": 2},
        10: {"hosts": [f"{HOST_A}:2", f"{HOST_B}:2", "{HOST_C}:2"], "expect": 4},
    },
    # SIGKILL of rank 0 (the coordinator, and the rank the state is broadcast from): its host is
    # blacklisted and the other host's workers go on from their own commit.
    "kill_rank0": {
        6: {"fail": ("kill", "rank", 0), "expect": 2},
    },
    # Every worker raises at step 5: the job ends with an error.
    "all_fail": {
        5: {"fail": ("raise", "*", "*"), "expect": None},
    },
    # One worker on A (its training step traced at size 1); B joins with two (3); B shrinks to one
    # (2). A's worker keeps its trace throughout (Horovod's test_elastic_tensorflow2
    # test_hosts_added_and_removed, slots=1).
    "grow_from_one": {
        4: {"hosts": [f"{HOST_A}:1", f"{HOST_B}:2"], "expect": 3},
        10: {"hosts": [f"{HOST_A}:1", f"{HOST_B}:1"], "expect": 2},
    },
    # --reset-limit 1: the first change is allowed, the second ends the job.
    "reset_limit": {
        4: {"hosts": [f"{HOST_A}:2", f"{HOST_B}:2"], "expect": 4},
        8: {"hosts": [f"{HOST_B}:2"], "expect": 2},
    },
    # --min-np 4: B's failure leaves 2 slots, fewer than --min-np, until --elastic-timeout.
    "below_min_np": {
        5: {"fail": ("raise", HOST_B, 0), "expect": 2},
    },
    # B fails and is blacklisted with a short cooldown; the discovery output keeps listing it;
    # after the cooldown the driver takes it back (4 again).
    "blacklist_cooldown": {
        5: {"fail": ("raise", HOST_B, 1), "expect": 2},
        6: {"hosts": None, "expect": 4},
    },
    # 50 resets without a change of membership: rank 0 raises HorovodInternalError mid-step at
    # steps 1-50 (as a collective that failed would), so both workers restore and re-initialize;
    # every round records the process's open descriptors and threads (nothing may grow).
    "many_resets": {k: {"reset": True} for k in range(1, 51)},
}
STEPS_OF = {"many_resets": 56}   # scenarios that need more than STEPS steps


def herring_shm_names():
    """herring's names in /dev/shm (a test compares them with those there before its launch: a
    segment another job or a killed process left is not this job's)."""
    return sorted(n for n in os.listdir("/dev/shm") if "herring" in n)


def resources():
    """This process's open file descriptors and threads, and herring's names in /dev/shm."""
    return {"fds": len(os.listdir("/proc/self/fd")), "threads": len(os.listdir("/proc/self/task")),
            "shm": herring_shm_names()}


def third_host():
    """A third name of this machine for a replacement host: its first non-loopback IPv4 address
    (local to horovodrun, which therefore starts the worker without ssh), unless
    HERRING_TEST_HOST_C names one."""
    if os.environ.get("HERRING_TEST_HOST_C"):
        return os.environ["HERRING_TEST_HOST_C"]
    import psutil
    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family == socket.AF_INET and not a.address.startswith("127."):
                return a.address
    raise RuntimeError("no non-loopback IPv4 address: the replacement-host scenarios need one")


def batch(step, rank):
    """The data a rank trains on at a step: the same on any run, whatever the process."""
    rng = np.random.default_rng(1000 * step + rank)
    x = rng.standard_normal((BATCH, IN_FEATURES))
    y = x @ np.linspace(-1.0, 1.0, IN_FEATURES)[:, None] + 0.1 * rng.standard_normal((BATCH, 1))
    return x, y


def initial_weights():
    rng = np.random.default_rng(7)
    return rng.standard_normal((IN_FEATURES, 1)) * 0.1, np.zeros((1,))


def reference(history, lr=LR, momentum=MOMENTUM):
    """Weights after SGD with momentum over the committed steps [(step, size)...]: each step
    averages the mean-squared-error gradients of ranks 0..size-1 on their batches. float64."""
    w, b = initial_weights()
    vw, vb = np.zeros_like(w), np.zeros_like(b)
    for step, size in history:
        gw, gb = np.zeros_like(w), np.zeros_like(b)
        for r in range(size):
            x, y = batch(step, r)
            err = x @ w + b - y                      # d/dpred of mean((pred - y)^2) = 2 err / n
            gw += x.T @ (2 * err / len(x))
            gb += (2 * err / len(x)).sum(axis=0)
        gw /= size
        gb /= size
        vw = momentum * vw + gw
        vb = momentum * vb + gb
        w = w - lr * vw
        b = b - lr * vb
    return w, b


class Log:
    """Each worker process appends its events to <results>/<pid>.jsonl."""

    def __init__(self, results):
        self.path = os.path.join(results, f"{os.getpid()}.jsonl")

    def __call__(self, **event):
        event["pid"] = os.getpid()
        event["t"] = time.time()
        with open(self.path, "a") as f:
            f.write(json.dumps(event) + "\n")


def once(results, name):
    """True the first time any process of the job asks for `name` (an O_EXCL marker file)."""
    try:
        fd = os.open(os.path.join(results, f"done.{name}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def write_hosts(path, hosts):
    """Rewrites the discovery output atomically (the driver runs `cat` on it every second)."""
    c = third_host() if any("{HOST_C}" in h for h in hosts) else None
    text = "".join(h.replace("{HOST_C}", c or "") + "\n" for h in hosts)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def write_discovery(directory, hosts):
    """The hosts file and a --host-discovery-script that prints it, in `directory`; returns
    (hosts file, script)."""
    hosts_file = os.path.join(directory, "hosts")
    write_hosts(hosts_file, hosts)
    script = os.path.join(directory, "discover.sh")
    with open(script, "w") as f:
        f.write(f"#!/bin/sh\ncat {hosts_file}\n")
    os.chmod(script, 0o755)
    return hosts_file, script


def read_events(results):
    events = []
    for name in os.listdir(results):
        if name.endswith(".jsonl"):
            with open(os.path.join(results, name)) as f:
                events += [json.loads(line) for line in f if line.strip()]
    return sorted(events, key=lambda e: e["t"])


class Scenario:
    """Runs the training loop of a worker through its scenario; framework-neutral: `hvd` is the
    framework's Horovod module, `train_step(step, mid_step)` trains one step, calls `mid_step()`
    between its forward pass and its gradient allreduce, and may return fields for the step's
    event."""

    def __init__(self, hvd):
        self.hvd = hvd
        self.name = os.environ["HERRING_TEST_SCENARIO"]
        self.actions = SCENARIOS[self.name]
        self.steps = STEPS_OF.get(self.name, STEPS)
        self.results = os.environ["HERRING_TEST_RESULTS"]
        self.hosts_file = os.environ["HERRING_TEST_HOSTS_FILE"]
        self.host = os.environ["HOROVOD_HOSTNAME"]
        self.log = Log(self.results)

    def hold_until_size(self, state, size, step, seconds=120):
        """Every rank commits (no training) until the driver's new round has `size` workers; the
        HostsUpdatedInterrupt (or HorovodInternalError) that a commit raises ends the hold."""
        hvd = self.hvd
        deadline = time.monotonic() + seconds
        while hvd.size() != size:
            if time.monotonic() > deadline:
                raise TimeoutError(f"rank {hvd.rank()}: size still {hvd.size()}, not {size}, {seconds} s "
                                   f"after step {step}")
            time.sleep(0.1)
            state.commit()

    def fails_here(self, action):
        _, host, local_rank = action
        if host == "rank":
            return self.hvd.rank() == local_rank
        return host in ("*", self.host) and local_rank in ("*", self.hvd.local_rank())

    def mid_step(self, step, action):
        hvd = self.hvd
        if action.get("reset") and hvd.rank() == 0 and once(self.results, f"reset.{step}"):
            raise hvd.HorovodInternalError(f"injected reset at step {step}")
        fail = action.get("fail")
        # Once per worker that the action names ("rank": once, whoever is that rank after a reset).
        who = "rank" if fail and fail[1] == "rank" else f"{self.host}.{hvd.local_rank()}"
        if fail and self.fails_here(fail) and once(self.results, f"fail.{step}.{who}"):
            self.log(event="fail", how=fail[0], rank=hvd.rank(), host=self.host, step=step)
            if fail[0] == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError(f"injected failure of rank {hvd.rank()} on {self.host} at step {step}")

    def begin_round(self, state):
        """Logs what hvd reports at the start of a round (after a reset, the new membership)."""
        hvd = self.hvd
        self.log(event="round", rank=hvd.rank(), size=hvd.size(), local_rank=hvd.local_rank(),
                 local_size=hvd.local_size(), cross_rank=hvd.cross_rank(), cross_size=hvd.cross_size(),
                 host=self.host, node=socket.gethostname(), step=state.step, **resources())

    def before_step(self, state, step):
        """Carries out the step's host change and holds until it lands; returns the step's action
        (for mid_step)."""
        hvd = self.hvd
        action = self.actions.get(step, {})
        if action.get("hosts") and hvd.rank() == 0 and once(self.results, f"hosts.{step}"):
            write_hosts(self.hosts_file, action["hosts"])
            self.log(event="hosts", step=step, hosts=action["hosts"], size=hvd.size())
        if action.get("expect") and not action.get("fail"):  # a failure resets by itself
            self.hold_until_size(state, action["expect"], step)
        return action

    def after_step(self, state, step, **extra):
        """Records a trained step in the state (committed by the caller) and in the event log,
        with the engine's response-cache hits so far and what the step's `extra` says."""
        import hvd_herring
        hvd = self.hvd
        state.step = step + 1
        state.history = state.history + [(step, hvd.size())]  # a new list: save() keeps a reference
        self.log(event="step", step=step, rank=hvd.rank(), size=hvd.size(), host=self.host,
                 cache_hits=hvd_herring.counters()["cache_hits"], **extra)

    def train(self, state, train_step):
        """The body of the hvd.elastic.run function: from the committed step to the last."""
        self.begin_round(state)
        while state.step < self.steps:
            step = state.step
            action = self.before_step(state, step)
            extra = train_step(step, lambda: self.mid_step(step, action))
            self.after_step(state, step, **(extra or {}))
            state.commit()

    def finish(self, state, weight, bias, lr=LR, momentum=MOMENTUM):
        """`lr`, `momentum`: what the optimizer really used (Keras rounds both to float32)."""
        hvd = self.hvd
        if hvd.rank() == 0:
            with open(os.path.join(self.results, "final.json"), "w") as f:
                json.dump({"history": state.history, "size": hvd.size(), "weight": weight.tolist(),
                           "bias": bias.tolist(), "lr": lr,
                           "momentum": momentum}, f)
        self.log(event="done", rank=hvd.rank(), size=hvd.size(), host=self.host)
