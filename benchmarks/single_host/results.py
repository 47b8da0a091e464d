"""Reading a single-host run's results: records pooled over repeats into medians, the
memory-traffic bound, and the goals. Shared by the report and the plots."""

import statistics

from benchmarks.common.formatting import fmt_time

# The goals of the performance issue, on one host (the simulated-cluster goals come with the
# cluster results, see report.cluster_section).
GOAL_SIZE, GOAL_NP = 64 << 20, 4
PEER_GOALS = [("torch-gloo", 3.0), ("horovod-gloo", 6.0), ("mpi", 2.0)]
BOUND_GOAL = 1.5
# Below this size the buffers of a few ranks fit in the caches and the memory bound says nothing.
BOUND_MIN_BYTES = 4 << 20
TINY_GOAL = ("horovod-gloo", 3.0)


class Results:
    def __init__(self, data):
        self.data = data
        self.records = data.get("records", [])

    # --- pooled medians -------------------------------------------------------------------
    def samples(self, workload, stack, np, variant="", **match):
        times = []
        for r in self.records:
            if (r.get("workload") == workload and r.get("stack") == stack and r.get("np") == np
                    and r.get("variant", "") == variant and all(r.get(k) == v for k, v in match.items())):
                times += r["times"]
        return times

    def median(self, workload, stack, np, variant="", **match):
        times = self.samples(workload, stack, np, variant, **match)
        return statistics.median(times) if times else None

    def baseline(self, workload, stack, np, variant=""):
        times = []
        for r in self.records:
            if (r.get("workload") == workload and r.get("stack") == stack and r.get("np") == np
                    and r.get("variant", "") == variant and "baseline" in r):
                times += r["baseline"]["times"]
        return statistics.median(times) if times else None

    def record(self, workload, **match):
        """The first record of a workload matching `match` (for its descriptive fields)."""
        for r in self.records:
            if r.get("workload") == workload and all(r.get(k) == v for k, v in match.items()):
                return r
        return None

    def values(self, field, **match):
        return sorted({r[field] for r in self.records
                       if field in r and all(r.get(k) == v for k, v in match.items())})

    @property
    def stacks(self):
        return self.data.get("plan", {}).get("stacks", [])

    @property
    def nps(self):
        return self.data.get("plan", {}).get("nps", [])

    def warmup(self, workload):
        """(warm-up iterations, warm-up seconds) of a workload in the run's plan, (None, 0.0) when
        the plan does not have it."""
        spec = next((w for w in self.data.get("plan", {}).get("workloads", []) if w.get("id") == workload), {})
        timing = spec.get("timing", {})
        return timing.get("warmup"), float(timing.get("warmup_seconds", 0.0))

    # --- the memory-traffic bound ----------------------------------------------------------
    def membw(self, kernel, procs=None):
        """Median rate (bytes of the kernel's destination per second) of `kernel` with `procs`
        processes (default: the most measured, i.e. every core)."""
        results = (self.data.get("membw") or {}).get("results", [])
        cands = [r for r in results if r["kernel"] == kernel and (procs is None or r["procs"] == procs)]
        if not cands:
            return None
        return max(cands, key=lambda r: r["procs"])["median"]

    def memory_bound(self, nbytes, np):
        """Least time of an allreduce of nbytes over np local ranks: it must read every rank's input
        once and write every rank's output once, 2*np*nbytes of traffic, at the traffic rate memcpy
        reaches on every core (2 bytes of traffic per byte copied: the same 1:1 read/write mix)."""
        copy = self.membw("copy")
        return None if not copy else 2 * np * nbytes / (2 * copy)

    def memory_bound_add(self, nbytes, np):
        """The same least traffic at the traffic rate of `a += b` (3 bytes per byte of a): a
        stricter figure, since that kernel reads twice as much as it writes."""
        add = self.membw("add")
        return None if not add else 2 * np * nbytes / (3 * add)

    # --- goals -------------------------------------------------------------------------------
    def goals(self):
        """[(goal, target, measured text, ratio or None, met True/False/None)]"""
        out = []
        size_txt = f"{GOAL_SIZE >> 20} MiB allreduce, np={GOAL_NP}"
        herring = self.median("allreduce", "herring", GOAL_NP, bytes=GOAL_SIZE)
        bound = self.memory_bound(GOAL_SIZE, GOAL_NP)
        # Two rows: buffers in herring's zero-copy memory (the path built for this goal), and any
        # tensor (staged through shared memory; the report says why that cannot get there).
        for stack, who in (("herring-zero-copy", "herring, buffers in zero-copy memory"),
                           ("herring", "herring, ordinary tensors")):
            goal = f"{size_txt}: {who}, within {BOUND_GOAL}x of the memory-traffic bound"
            mine = self.median("allreduce", stack, GOAL_NP, bytes=GOAL_SIZE)
            if mine is not None and bound is not None:
                ratio = mine / bound
                out.append((goal, f"<= {BOUND_GOAL}x", f"{stack} {fmt_time(mine)}, bound {fmt_time(bound)}",
                            ratio, ratio <= BOUND_GOAL))
            elif stack == "herring" or mine is not None:
                out.append((goal, f"<= {BOUND_GOAL}x", "not measured in this run", None, None))
        for peer, target in PEER_GOALS:
            other = self.median("allreduce", peer, GOAL_NP, bytes=GOAL_SIZE)
            out.append(_faster_than_peer_row(f"{size_txt}: herring >= {target:g}x faster than {peer}",
                                             peer, target, herring, other, ""))
        peer, target = TINY_GOAL
        tiny_nps = [n for n in self.values("np", workload="tiny") if self.median("tiny", "herring", n) is not None]
        np = GOAL_NP if GOAL_NP in tiny_nps else (max(tiny_nps) if tiny_nps else GOAL_NP)
        rec = self.record("tiny", np=np)
        count = rec["count"] if rec else 1000
        goal = f"{count} tiny tensors per step, np={np}: herring >= {target:g}x faster than {peer} (cache on)"
        mine, other = self.median("tiny", "herring", np), self.median("tiny", peer, np)
        out.append(_faster_than_peer_row(goal, peer, target, mine, other, " per step"))
        return out


def _faster_than_peer_row(goal, peer, target, mine, other, per):
    """A goal row "herring >= target x faster than peer" from the two medians (None: not measured)."""
    if mine is None or other is None:
        return (goal, f">= {target:g}x", "not measured in this run", None, None)
    ratio = other / mine
    return (goal, f">= {target:g}x", f"{peer} {fmt_time(other)}, herring {fmt_time(mine)}{per}", ratio, ratio >= target)
