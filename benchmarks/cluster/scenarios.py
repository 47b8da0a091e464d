"""What the simulated-cluster benchmarks run: scenarios (each in its own fresh SimulatedCluster)
made of launches (one horovodrun each, with its knobs and the worker tasks it runs).

    goal    the performance issue's goals: 4 worker hosts + 4 server hosts at 1 Gbit/s; herring
            with dedicated servers vs the ring over the same 4 worker hosts, herring with colocated
            servers vs ring at 1 and 2 ranks per host; allreduce sizes and real gradient sets
    r2sp    R2SP's push schedule with the server links the bottleneck (servers at half the
            workers' rate): HERRING_SCHEDULE=all vs r2sp on a communication-heavy training loop,
            and the same loop in R2SP training mode (hvd.R2SPTrainer)
    hetero  heterogeneous workers: one worker host slower; equal batch split vs hvd.BatchSizeTuner
    psld    PSLD: one of four server hosts behind a link of a quarter of the others' rate; static
            shares vs HERRING_BALANCER=psld, step time and time to rebalance
    psld-cpu  the same with the slow server made slow by HERRING_SLOWDOWN (a loaded CPU)
    latency the issue's latency goal: 2 worker hosts at 1 Gbit/s; one small allreduce at a time
            (4 KiB, 16 KiB, 64 KiB; herring defaults, 1 and 2 ranks per host) next to the TCP round
            trip between the two hosts, measured in the same cluster before and after the launches

Presets: `full` (the report's run) and `smoke` (the test suite's: tiny sizes, every task kind, one
small cluster shared by all three scenarios, about a minute)."""

import copy
from dataclasses import dataclass, field
from typing import List, Optional

MiB = 1 << 20

HERRING = {"HOROVOD_BACKEND": "herring"}


@dataclass
class Launch:
    id: str
    label: str                        # what the report calls it
    env: dict                         # knobs on top of HOROVOD_BACKEND=herring
    tasks: list                       # cluster_worker.py task specs
    with_servers: bool = False        # append the server hosts (1 slot each) to -H
    slots_per_host: Optional[int] = None
    timeout: float = 900
    tuned: bool = False               # a knob away from its default (a sensitivity check, not a headline)


@dataclass
class Scenario:
    id: str
    title: str
    spec: dict                        # a ClusterSpec as a dict (tools.simcluster.cluster_spec)
    launches: List[Launch]
    # iperf3 measurements: (label, src host index, dst host index)
    links: list = field(default_factory=list)
    # Run in the previous scenario's cluster when the specs are identical (the smoke preset: a
    # cluster costs seconds the test suite does not have); the full run builds one per scenario.
    reuse_cluster: bool = False
    # TCP ping-pong between two hosts (benchmarks/cluster/rtt.py), before and after the launches:
    # {"src": host index, "dst": host index, "sizes": [message bytes], "iters": n, "warmup": n}
    rtt: Optional[dict] = None


def _hosts(workers, servers, rate="1gbit", server_rates=None):
    hosts = [{"slots": 1} for _ in range(workers)]
    for i in range(servers):
        h = {"role": "server"}
        if server_rates and server_rates[i]:
            h["rate"] = server_rates[i]
        hosts.append(h)
    return {"rate": rate, "hosts": hosts}


def _allreduce(sizes, warmup, iters):
    return {"id": "allreduce", "kind": "allreduce", "sizes": sizes, "timing": {"warmup": warmup, "iters": iters}}


def _gradset(model, warmup, iters, budget):
    t = {"warmup": warmup, "min_iters": iters, "max_iters": iters, "budget": budget}
    return {"id": f"gradset-{model}", "kind": "gradset", "model": model, "timing": t,
            "baseline_timing": {"warmup": 1, "min_iters": 2, "max_iters": 2, "budget": 0.1}}


def goal(sizes, iters, gradsets, rate="1gbit", two_slots=True, workers=4, servers=4, colocated=True,
         slot_sensitivity=None):
    tasks = [_allreduce(sizes, 2, iters)] + gradsets
    dedicated = {"HERRING_DEDICATED_SERVERS": str(servers)}
    launches = [
        Launch("herring-dedicated", f"herring, {servers} dedicated server hosts", dedicated, tasks, with_servers=True),
        Launch("ring", "ring (HERRING_ALLREDUCE=ring)", {"HERRING_ALLREDUCE": "ring"}, tasks),
    ]
    if colocated:
        launches.append(Launch("herring-colocated", "herring, colocated servers", {}, tasks))
    if two_slots:
        ar = [_allreduce(sizes, 2, iters)]
        launches += [
            Launch("herring-colocated-2", "herring, colocated servers, 2 ranks per host", {}, ar, slots_per_host=2),
            Launch("ring-2", "ring, 2 ranks per host", {"HERRING_ALLREDUCE": "ring"}, ar, slots_per_host=2),
        ]
    if slot_sensitivity:
        # The engine's cross-host unit is a quarter of HERRING_SHM_SLOT_BYTES (sized for the caches of
        # one host): how much the links' round trips per chunk cost shows with a larger one.
        size, iters_s = slot_sensitivity
        knob = {"HERRING_SHM_SLOT_BYTES": str(16 * MiB)}
        ar = [_allreduce([size], 2, iters_s)]
        launches += [
            Launch("herring-dedicated-slot16m", f"herring, {servers} dedicated server hosts, "
                   f"HERRING_SHM_SLOT_BYTES=16 MiB", dict(dedicated, **knob), ar, with_servers=True, tuned=True),
            Launch("herring-colocated-slot16m", "herring, colocated servers, HERRING_SHM_SLOT_BYTES=16 MiB",
                   dict(knob), ar, tuned=True),
            Launch("herring-colocated-2-slot16m", "herring, colocated servers, 2 ranks per host, "
                   "HERRING_SHM_SLOT_BYTES=16 MiB", dict(knob), ar, slots_per_host=2, tuned=True),
        ]
    return Scenario("goal", f"{workers} worker hosts + {servers} server hosts", _hosts(workers, servers, rate),
                    launches, links=[("worker -> worker", 1, 0), ("worker -> server", 0, workers)])


def r2sp(widths, steps, rate="1gbit", server_rate="500mbit"):
    task = {"id": "train", "kind": "train", "widths": widths, "batch": 8, "steps": steps}
    dedicated = {"HERRING_DEDICATED_SERVERS": "4"}
    return Scenario(
        "r2sp", f"R2SP: 4 worker hosts at {rate}, 4 server hosts at {server_rate}",
        _hosts(4, 4, rate, [server_rate] * 4),
        [Launch("schedule-all", "HERRING_SCHEDULE=all (every push at once)", dict(dedicated, HERRING_SCHEDULE="all"),
                [task], with_servers=True),
         Launch("schedule-r2sp", "HERRING_SCHEDULE=r2sp (round-robin pushes)", dict(dedicated, HERRING_SCHEDULE="r2sp"),
                [task], with_servers=True),
         Launch("mode-r2sp", "R2SP training mode (hvd.R2SPTrainer: server-held parameters, round-robin turns)",
                dict(dedicated), [dict(task, kind="train_r2sp_mode")], with_servers=True)],
        links=[("worker -> worker", 1, 0), ("worker -> server", 0, 4)])


def hetero(widths, steps, global_batch, sample_seconds, slow_factors, interval, rate="1gbit"):
    tasks = [{"id": f"hetero-x{f:g}", "kind": "hetero", "widths": widths, "steps": steps,
              "global_batch": global_batch, "sample_seconds": sample_seconds, "slow_factor": f,
              "slow_ranks": [3], "interval": interval} for f in slow_factors]
    return Scenario("hetero", f"Heterogeneous workers: 4 worker hosts at {rate}, host 3 slower",
                    _hosts(4, 0, rate),
                    [Launch("hetero", "equal split, then hvd.BatchSizeTuner", {}, tasks)],
                    links=[("worker -> worker", 1, 0)])


def psld(widths, steps, interval, rate="1gbit", slow_rate="250mbit"):
    task = {"id": "train", "kind": "train", "widths": widths, "batch": 8, "steps": steps}
    dedicated = {"HERRING_DEDICATED_SERVERS": "4", "HERRING_BALANCE_INTERVAL": str(interval)}
    return Scenario(
        "psld", f"PSLD: 4 worker hosts + 4 server hosts at {rate}, one server host at {slow_rate}",
        _hosts(4, 4, rate, [None, None, None, slow_rate]),
        [Launch("static", "static equal shares (HERRING_BALANCER=none)", dict(dedicated, HERRING_BALANCER="none"),
                [task], with_servers=True),
         Launch("psld", "HERRING_BALANCER=psld", dict(dedicated, HERRING_BALANCER="psld"), [task], with_servers=True)],
        links=[("worker -> worker", 1, 0), ("worker -> fast server", 0, 4), ("worker -> slow server", 0, 7)])


def psld_cpu(widths, steps, interval, us_per_mib, rate="1gbit", workers=4, servers=4, static=True, extra_tasks=()):
    # Rank order: the workers, then the server shards, one per server host; the last one is slow.
    task = {"id": "train", "kind": "train", "widths": widths, "batch": 8, "steps": steps}
    slow = {"HERRING_DEDICATED_SERVERS": str(servers), "HERRING_BALANCE_INTERVAL": str(interval),
            "HERRING_SLOWDOWN": f"{workers + servers - 1}:{us_per_mib}"}
    launches = [Launch("psld", "HERRING_BALANCER=psld", dict(slow, HERRING_BALANCER="psld"),
                       [task] + list(extra_tasks), with_servers=True)]
    if static:
        launches.insert(0, Launch("static", "static equal shares (HERRING_BALANCER=none)",
                                  dict(slow, HERRING_BALANCER="none"), [task], with_servers=True))
    return Scenario(
        "psld-cpu", f"PSLD: {workers} worker hosts + {servers} server hosts at {rate}, one server's CPU slowed "
                    f"(HERRING_SLOWDOWN {us_per_mib} us/MiB)",
        _hosts(workers, servers, rate), launches, links=[])


KiB = 1 << 10
LATENCY_SIZES = [4 * KiB, 16 * KiB, 64 * KiB]


def latency(iters, sizes=LATENCY_SIZES, two_slots=True, rtt_iters=2000, spec=None):
    """One small allreduce at a time between 2 worker hosts, herring's defaults (colocated servers),
    next to the TCP round trip between the same hosts. `spec`: another cluster to run in (the smoke
    preset reuses its cluster, whose extra server hosts stay idle here)."""
    # No per-iteration windows: iterations far shorter than the link sampler's period.
    ar = [dict(_allreduce(sizes, 20, iters), windows=False)]
    launches = [Launch("herring", "herring, defaults (colocated servers)", {}, ar)]
    if two_slots:
        launches.append(Launch("herring-2", "herring, defaults, 2 ranks per host", {}, ar, slots_per_host=2))
    return Scenario("latency", "Small-message latency: 2 worker hosts at 1 Gbit/s", spec or _hosts(2, 0),
                    launches, rtt={"src": 1, "dst": 0, "sizes": [1, 4 * KiB], "iters": rtt_iters, "warmup": 200})


def _full():
    return [
        goal([16 * MiB, 64 * MiB, 128 * MiB], iters=7,
             gradsets=[_gradset("resnet50", 2, 5, 1.0), _gradset("bert-base", 1, 4, 1.0)],
             slot_sensitivity=(64 * MiB, 5)),
        r2sp([1024, 2048, 2048, 2048, 1024], steps=30),
        hetero([256, 512, 512, 10], steps=60, global_batch=128, sample_seconds=0.002,
               slow_factors=[1.5, 3.0], interval=10),
        psld([1024, 2048, 2048, 1024], steps=80, interval=10),
        psld_cpu([1024, 2048, 2048, 1024], steps=60, interval=10, us_per_mib=50000),
        latency(iters=400),
    ]


def _smoke():
    # One small cluster (2 worker + 2 server hosts) shared by three scenarios and four launches,
    # covering every task kind, the link sampler and the analysis, in about a minute.
    hetero_task = {"id": "hetero-x3", "kind": "hetero", "widths": [16, 32, 4], "steps": 6, "global_batch": 8,
                   "sample_seconds": 0.002, "slow_factor": 3.0, "slow_ranks": [1], "interval": 2}
    g = goal([1 * MiB], iters=3, gradsets=[], two_slots=False, workers=2, servers=2, colocated=False)
    g.links = [("worker -> worker", 1, 0)]
    p = psld_cpu([64, 256, 64], steps=8, interval=2, us_per_mib=200000, workers=2, servers=2, static=False,
                 extra_tasks=[hetero_task])
    p.reuse_cluster = True
    # The latency scenario in the same cluster (its server hosts idle): one launch, a few seconds.
    lat = latency(iters=30, sizes=[4 << 10], two_slots=False, rtt_iters=300, spec=g.spec)
    lat.reuse_cluster = True
    return [g, p, lat]


PRESETS = {"full": _full, "smoke": _smoke}


def scenarios(preset, only=None):
    out = copy.deepcopy(PRESETS[preset]())
    if only:
        unknown = set(only) - {s.id for s in out}
        if unknown:
            raise ValueError(f"unknown scenarios {sorted(unknown)}; preset {preset} has {[s.id for s in out]}")
        out = [s for s in out if s.id in only]
    return out
