"""What a benchmark run measures: the presets (smoke, quick, full) and how they become launches.

A plan is a list of workload specs (what bench_worker.py runs), the stacks, the rank counts and the
number of repeats. Every (rank count, stack, variant) becomes one launch running every workload
that applies to it, so torch is imported once per launch rather than once per workload."""

import copy
from dataclasses import dataclass, field

KiB, MiB = 1 << 10, 1 << 20
ALL_STACKS = ["herring", "herring-ring", "herring-zero-copy", "torch-gloo", "ddp-herring", "horovod-gloo", "mpi",
              "deepspeed-shm"]
# Stacks that offer an allreduce and nothing else: DeepSpeed's shm op has no training integration
# for CPU data parallelism to compare (its ZeRO engine is not a Horovod-style allreduce of gradients).
ALLREDUCE_ONLY_STACKS = ["deepspeed-shm"]
# The peers herring must be at or ahead of (issue 27): other stacks, not herring's own variants.
PEERS = ["torch-gloo", "horovod-gloo", "mpi", "deepspeed-shm"]
# Stacks the 1000-tiny-tensors workload runs on: the ring variant negotiates exactly as herring does.
TINY_STACKS = ["herring", "torch-gloo", "horovod-gloo", "mpi"]


def _timing(warmup, min_iters, max_iters, budget, warmup_seconds=0.0):
    return {"warmup": warmup, "min_iters": min_iters, "max_iters": max_iters, "budget": budget,
            "warmup_seconds": warmup_seconds}


# The DDP settings measured beside torch's defaults (stacks.BUCKET_VIEW, stacks.AVERAGE_HOOK); a
# stack runs those it has.
DDP_VARIANTS = ["bucket-view", "bucket-view-average-hook"]
# DDP's first three steps are not its steady state: the first builds its buckets, the second
# rebuilds them in the order the gradients came, and on herring the third moves them into
# zero-copy memory (hvd_herring/torch/distributed/persistent_buffers.py).
DDP_WARMUP = 3


def _full():
    return dict(
        nps=[2, 4], stacks=list(ALL_STACKS), repeats=1,
        membw={"bytes": 256 * MiB, "trials": 5, "reps": 4},
        workloads=[
            # Each size warms up for half a second, as in the latency preset (workloads.timed_loop).
            {"id": "allreduce", "kind": "allreduce", "sizes": [4 * KiB * 4 ** k for k in range(9)],  # 4 KiB .. 256 MiB
             "timing": _timing(2, 5, 50, 1.5, warmup_seconds=0.5), "timeout": 900},
            {"id": "gradset-resnet50", "kind": "gradset", "model": "resnet50", "variants": DDP_VARIANTS,
             "timing": _timing(DDP_WARMUP, 5, 20, 3.0), "baseline_timing": _timing(1, 3, 10, 1.0), "timeout": 300},
            {"id": "gradset-bert-base", "kind": "gradset", "model": "bert-base", "variants": DDP_VARIANTS,
             "timing": _timing(DDP_WARMUP, 5, 10, 4.0), "baseline_timing": _timing(1, 3, 5, 1.0), "timeout": 600},
            {"id": "tiny", "kind": "tiny", "count": 1000, "elements": 1, "stacks": TINY_STACKS,
             "variants": ["cache-off"], "timing": _timing(3, 10, 50, 2.0), "timeout": 300},
            {"id": "train", "kind": "train", "widths": [1024, 4096, 4096, 4096, 1024], "batch": 8,
             "variants": DDP_VARIANTS,
             "timing": _timing(DDP_WARMUP, 5, 30, 4.0), "baseline_timing": _timing(1, 3, 10, 1.0), "timeout": 400},
        ])


def _quick():
    return dict(
        nps=[4], stacks=list(ALL_STACKS), repeats=1,
        membw={"bytes": 128 * MiB, "trials": 3, "reps": 3},
        workloads=[
            {"id": "allreduce", "kind": "allreduce", "sizes": [4 * KiB, 256 * KiB, 4 * MiB, 64 * MiB],
             "timing": _timing(2, 5, 20, 1.0), "timeout": 400},
            {"id": "gradset-resnet50", "kind": "gradset", "model": "resnet50",
             "timing": _timing(1, 3, 10, 1.5), "baseline_timing": _timing(1, 3, 3, 0.5), "timeout": 200},
            {"id": "tiny", "kind": "tiny", "count": 1000, "elements": 1, "stacks": TINY_STACKS,
             "variants": ["cache-off"], "timing": _timing(2, 5, 20, 1.0), "timeout": 200},
            {"id": "train", "kind": "train", "widths": [1024, 4096, 4096, 1024], "batch": 8,
             "timing": _timing(1, 3, 10, 1.5), "baseline_timing": _timing(1, 3, 3, 0.5), "timeout": 200},
        ])


def _smoke():
    # Tiny sizes, to check the harness end to end in well under a minute (the test suite's).
    return dict(
        nps=[2], stacks=["herring", "torch-gloo", "mpi"], repeats=1,
        membw={"bytes": 32 * MiB, "trials": 2, "reps": 2},
        workloads=[
            {"id": "allreduce", "kind": "allreduce", "sizes": [4 * KiB, 64 * KiB],
             "timing": _timing(1, 3, 3, 0.1), "timeout": 60},
            {"id": "gradset-resnet18", "kind": "gradset", "model": "resnet18",
             "timing": _timing(1, 2, 2, 0.1), "baseline_timing": _timing(1, 2, 2, 0.1), "timeout": 60},
            {"id": "tiny", "kind": "tiny", "count": 50, "elements": 1, "stacks": TINY_STACKS,
             "variants": ["cache-off"], "timing": _timing(1, 3, 3, 0.1), "timeout": 60},
            {"id": "train", "kind": "train", "widths": [256, 512, 256], "batch": 4,
             "timing": _timing(1, 3, 3, 0.1), "baseline_timing": _timing(1, 2, 2, 0.1), "timeout": 60},
            {"id": "syncbn", "kind": "syncbn", "batch": 4, "image": 8, "widths": [4, 8],
             "stacks": ["herring", "torch-gloo"], "timing": _timing(1, 3, 3, 0.1), "timeout": 60},
        ])


def _latency():
    # One call at a time after a barrier, small sizes: where negotiation and hand-offs dominate.
    # herring's tcp-control variant is the first round's control plane, for a before/after; its
    # loop-only variant runs every cycle on the loop's thread (HERRING_CALLER_RUNS_CYCLES=0).
    # Every measurement warms up for half a second first (workloads.timed_loop says why).
    latency_stacks = ["herring", "torch-gloo", "horovod-gloo", "mpi", "deepspeed-shm"]
    return dict(
        nps=[2, 4], stacks=latency_stacks + ["herring-zero-copy"], repeats=1,
        # The bound's buffers as the full preset's (256 MiB): on 2026-11-28 64 MiB ones copied at
        # 48.7 GB/s with 2 processes, where the full preset's 256 MiB ones had 25.5 GB/s. Even so,
        # this machine's own rate for 2 processes varied from 25.5 to 38.6 GB/s between runs that
        # day (one process: 23 GB/s in every run), and the bound's verdicts vary with it.
        membw={"bytes": 256 * MiB, "trials": 2, "reps": 2},
        workloads=[
            {"id": "allreduce", "kind": "allreduce", "sizes": [4 * KiB * 4 ** k for k in range(7)],  # 4 KiB .. 16 MiB
             "stacks": latency_stacks, "variants": ["tcp-control", "loop-only"],
             "timing": _timing(20, 100, 400, 1.0, warmup_seconds=0.5), "timeout": 400},
            # The latency work must not cost the large sizes: 64 MiB at np=4 against torch-gloo and
            # the memory-traffic bound (membw above), ordinary tensors and zero-copy memory.
            {"id": "allreduce-large", "kind": "allreduce", "sizes": [64 * MiB], "nps": [4],
             "stacks": ["herring", "herring-zero-copy", "torch-gloo"], "timing": _timing(2, 10, 30, 1.5),
             "timeout": 300},
            {"id": "tiny", "kind": "tiny", "count": 1000, "elements": 1, "stacks": TINY_STACKS,
             "variants": ["tcp-control", "loop-only"], "timing": _timing(3, 10, 50, 2.0, warmup_seconds=0.5),
             "timeout": 300},
            # hvd.SyncBatchNorm on herring against DDP with nn.SyncBatchNorm's algorithm on gloo
            # (Horovod-gloo's SyncBatchNorm and torch's need a GPU).
            {"id": "syncbn", "kind": "syncbn", "batch": 8, "image": 32, "widths": [16, 32, 32],
             "stacks": ["herring", "torch-gloo"], "timing": _timing(3, 10, 60, 3.0, warmup_seconds=0.5),
             "timeout": 300},
        ])


def _ddp():
    # torch.distributed users: DDP on backend "herring" beside "gloo" and Horovod's API on herring.
    return dict(
        nps=[2, 4], stacks=["herring", "torch-gloo", "ddp-herring"], repeats=1,
        membw={"bytes": 64 * MiB, "trials": 2, "reps": 2},
        workloads=[w for w in _full()["workloads"] if w["kind"] in ("gradset", "train")])


def _peers():
    # Issue 27's goal range: herring against every peer (DeepSpeed's shm allreduce included), one
    # allreduce at a time, 4 KiB to 64 MiB at np=2 and np=4, with the full preset's timing; stacks
    # interleaved inside each rank count (Plan.launches). Report: benchmarks/single_host/peers_report.py.
    # Three rounds: the small sizes' medians moved by 2x and more from one launch of the same stack
    # to the next (np=2 4 KiB: herring 5.2-12.5 us, Open MPI 3.5-6.1 us in 4 launches each), so one
    # launch per stack decided a verdict by which launch drew a slow machine; pooled over three
    # interleaved rounds, a slow spell weighs on every stack and no single launch decides.
    return dict(
        nps=[2, 4], stacks=["herring"] + PEERS, repeats=3,
        membw={"bytes": 64 * MiB, "trials": 2, "reps": 2},
        workloads=[{"id": "allreduce", "kind": "allreduce", "sizes": [4 * KiB * 4 ** k for k in range(8)],  # .. 64 MiB
                    "timing": _timing(2, 5, 50, 1.5, warmup_seconds=0.5), "timeout": 600}])


PRESETS = {"smoke": _smoke, "quick": _quick, "full": _full, "latency": _latency, "ddp": _ddp, "peers": _peers}


@dataclass
class Plan:
    preset: str
    nps: list
    stacks: list
    repeats: int
    workloads: list
    membw: dict
    extra_env: dict = field(default_factory=dict)   # stack -> environment added to its launches

    def launches(self, variants_of):
        """[(repeat, np, stack, variant, [workload specs])] in run order. Stacks alternate inside
        each (repeat, np) so that slow drifts of the machine's load spread over all of them."""
        out = []
        for repeat in range(self.repeats):
            for np in self.nps:
                for stack in self.stacks:
                    for variant in [None] + list(variants_of(stack)):
                        specs = [w for w in self.workloads if _applies(w, stack, variant, np)]
                        if specs:
                            out.append((repeat, np, stack, variant, specs))
        return out


def _applies(spec, stack, variant, np):
    if stack not in spec.get("stacks", ALL_STACKS):
        return False
    if stack in ALLREDUCE_ONLY_STACKS and spec["kind"] != "allreduce":
        return False
    if np not in spec.get("nps", [np]):
        return False
    return variant is None or variant in spec.get("variants", [])


def make_plan(preset, stacks=None, nps=None, workloads=None, sizes=None, repeats=None, tiny_count=None,
              extra_env=None):
    base = copy.deepcopy(PRESETS[preset]())
    specs = base["workloads"]
    if workloads:
        known = {w["id"] for w in specs}
        unknown = set(workloads) - known
        if unknown:
            raise ValueError(f"unknown workloads {sorted(unknown)}; preset {preset} has {sorted(known)}")
        specs = [w for w in specs if w["id"] in workloads]
    for w in specs:
        if sizes and w["kind"] == "allreduce":
            w["sizes"] = list(sizes)
        if tiny_count and w["kind"] == "tiny":
            w["count"] = int(tiny_count)
    unknown = set(stacks or []) - set(ALL_STACKS)
    if unknown:
        raise ValueError(f"unknown stacks {sorted(unknown)}; known: {ALL_STACKS}")
    return Plan(preset=preset, nps=list(nps or base["nps"]), stacks=list(stacks or base["stacks"]),
                repeats=int(repeats or base["repeats"]), workloads=specs, membw=base["membw"],
                extra_env=dict(extra_env or {}))
