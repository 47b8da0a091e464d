"""Figures derived from a simulated-cluster run's raw results (benchmarks/cluster/run.py): link
bounds from the measured link rates and each algorithm's traffic, medians, ratios, the goals of
the performance issue, R2SP, batch tuning and PSLD figures. Pure functions of the JSON, so the
report can be regenerated from saved results.

Link bounds. A host's link carries at most its measured TCP goodput G (iperf3 in the same
cluster; about 95.5% of the tbf rate, the rest is Ethernet/IP/TCP headers) in each direction at
once (tbf shapes each direction separately: full duplex). For an allreduce of N bytes per rank:
  - herring with S dedicated server hosts and W worker hosts: each worker host sends its N bytes
    (reduced across its local ranks in shared memory first) and receives N bytes of sums; each
    server host receives W*N/S and sends as much. Bound: max(N/G_worker, W*N/S/G_server).
  - herring with colocated servers on H hosts: each host sends the (H-1)/H * N of its data that
    other hosts' shards own and receives as much of sums back; it also receives the other H-1
    hosts' contributions to its own N/H and sends them the sums: 2(H-1)/H * N per direction.
    Bound: 2(H-1)/H * N / G (the ring's, at one rank per host).
  - ring over P ranks (hosts in rank order, k ranks per host): every rank sends 2(P-1)/P * N to
    its successor; one rank per host sends across the host's link. Bound: 2(P-1)/P * N / G.
So with W = S = 4 and equal links, ring/PS can be at most 2(4-1)/4 = 1.5x from bandwidth."""

import statistics

from benchmarks.common.formatting import fmt_bytes, fmt_time

TCP_PAYLOAD_FRACTION = 1448 / 1514      # what tbf's Ethernet-frame rate leaves for TCP payload
GOAL_SIZE = 64 << 20
GOAL_RATIO, GOAL_BOUND_FRACTION, GOAL_COLOCATED = 1.8, 0.90, 1.0


def median(xs):
    return statistics.median(xs) if xs else None


def quartiles(xs):
    if len(xs) < 2:
        return (xs[0], xs[0]) if xs else (None, None)
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], q[2]


# -- the cluster ------------------------------------------------------------------------------
def _rate_bits(text):
    from tools.simcluster.cluster_spec import parse_rate
    return parse_rate(text)


class Cluster:
    """A scenario's hosts, roles, configured and measured link rates."""

    def __init__(self, scenario):
        self.sc = scenario
        spec = scenario["spec"]
        self.hosts = [h["name"] for h in spec["hosts"]]
        self.roles = [h["role"] for h in spec["hosts"]]
        self.configured = [_rate_bits(h.get("rate") or spec["rate"]) for h in spec["hosts"]]
        self.workers = [i for i, r in enumerate(self.roles) if r == "worker"]
        self.servers = [i for i, r in enumerate(self.roles) if r == "server"]
        self.measured = {}      # host index -> measured goodput (bits/s) of a path into/out of it
        for m in scenario.get("links", []):
            s, d = self.hosts.index(m["src"]), self.hosts.index(m["dst"])
            # A path is as fast as its slower end; attribute the measurement to the slower end
            # (or to both when they are configured alike).
            cs, cd = self.configured[s] or 0, self.configured[d] or 0
            for i in ([s, d] if cs == cd else [s if cs < cd else d]):
                self.measured.setdefault(i, m["sent_bps"])

    def goodput(self, i):
        """Measured goodput of host i's link, or of a host configured alike, or the configured rate
        times the TCP payload fraction when nothing comparable was measured."""
        if i in self.measured:
            return self.measured[i], True
        for j, g in self.measured.items():
            if self.configured[j] == self.configured[i]:
                return g, True
        return (self.configured[i] or 0) * TCP_PAYLOAD_FRACTION, False

    def slowest_server(self):
        if not self.servers:
            return None
        return min(self.servers, key=lambda i: (self.configured[i] or float("inf"), -i))


def launch_kind(launch):
    env = launch.get("env", {})
    if env.get("HERRING_ALLREDUCE") == "ring":
        return "ring"
    if launch.get("with_servers") and int(env.get("HERRING_DEDICATED_SERVERS", "0") or 0) > 0:
        return "dedicated"
    return "colocated"


def link_bound(cluster, kind, nbytes, slots=1, shares=None):
    """Least time (s) the links allow for an allreduce of nbytes per rank (see the module doc)."""
    W = len(cluster.workers)
    g_worker = min(cluster.goodput(i)[0] for i in cluster.workers)
    if kind == "dedicated":
        S = len(cluster.servers)
        shares = shares or [1.0 / S] * S
        worker_t = nbytes * 8 / g_worker
        server_t = max(W * nbytes * s * 8 / cluster.goodput(i)[0] for s, i in zip(shares, cluster.servers))
        return max(worker_t, server_t)
    if kind == "ring":
        P = W * slots
        return 2 * (P - 1) / P * nbytes * 8 / g_worker
    return 2 * (W - 1) / W * nbytes * 8 / g_worker


def traffic_factor(cluster, kind, slots=1):
    """Bytes per direction on the busiest worker link, as a multiple of N."""
    W = len(cluster.workers)
    if kind == "dedicated":
        return 1.0
    if kind == "ring":
        P = W * slots
        return 2 * (P - 1) / P
    return 2 * (W - 1) / W


def _link_summary(cluster, rec):
    """From the sampler: per iteration, the bytes the busiest worker and server links carried in
    each direction (as multiples of N) and how busy they were (wire rate / configured rate)."""
    links = rec.get("links")
    if not links or not links.get("iterations"):
        return None
    n = rec["bytes"]
    out = {}
    for role, idx in (("worker", cluster.workers), ("server", cluster.servers)):
        if not idx:
            continue
        per_iter = []
        for w in links["iterations"]:
            hs = w["hosts"]
            sent = max(hs[cluster.hosts[i]]["sent"] for i in idx)
            recv = max(hs[cluster.hosts[i]]["received"] for i in idx)
            busy = max(max(hs[cluster.hosts[i]]["sent"], hs[cluster.hosts[i]]["received"]) * 8
                       / (w["seconds"] * cluster.configured[i]) for i in idx if cluster.configured[i])
            per_iter.append((sent / n, recv / n, busy))
        if any(s > 0.01 or r > 0.01 for s, r, _ in per_iter):
            out[role] = {"sent_per_N": median([p[0] for p in per_iter]), "received_per_N": median([p[1] for p in per_iter]),
                         "busy": median([p[2] for p in per_iter])}
    cpu = [w["cpu_busy"] for w in links["iterations"] if w.get("cpu_busy") is not None]
    out["cpu_busy"] = median(cpu)
    return out


# -- goal scenario ------------------------------------------------------------------------------
def analyse_goal(sc):
    cl = Cluster(sc)
    rows = []        # one per (launch, record)
    for launch in sc["launches"]:
        kind = launch_kind(launch)
        slots = launch.get("slots_per_host") or 1
        for rec in launch["records"]:
            if rec["kind"] not in ("allreduce", "gradset"):
                continue
            n = rec["bytes"]
            times = rec["times"]
            bound = link_bound(cl, kind, n, slots)
            p25, p75 = quartiles(times)
            row = {"launch": launch["id"], "label": launch["label"], "kind": kind, "slots": slots, "np": rec["np"],
                   "tuned": bool(launch.get("tuned")),
                   "task": rec["task"], "workload": rec["kind"], "model": rec.get("model"), "bytes": n,
                   "median": rec["median"], "p25": p25, "p75": p75, "iterations": len(times), "bound": bound,
                   "of_bound": bound / rec["median"] if rec["median"] else None,
                   "traffic_factor": traffic_factor(cl, kind, slots),
                   "links": _link_summary(cl, rec) if rec["kind"] == "allreduce" else None}
            if rec["kind"] == "gradset":
                row["baseline"] = rec.get("baseline", {}).get("median")
                row["tensors"] = rec.get("tensors")
            rows.append(row)

    def find(launch, task, n):
        return next((r for r in rows if r["launch"] == launch and r["task"] == task and r["bytes"] == n), None)

    sensitivity = []
    for r in rows:
        if not r["tuned"]:
            continue
        base = next((b for b in rows if not b["tuned"] and b["kind"] == r["kind"] and b["slots"] == r["slots"]
                     and b["task"] == r["task"] and b["bytes"] == r["bytes"]), None)
        ring = find("ring", r["task"], r["bytes"])
        sensitivity.append({"launch": r["launch"], "label": r["label"], "bytes": r["bytes"], "median": r["median"],
                            "of_bound": r["of_bound"], "default": base and base["median"],
                            "default_of_bound": base and base["of_bound"],
                            "speedup": base and base["median"] / r["median"],
                            "ring_over_this": ring and ring["median"] / r["median"]})

    comparisons = []
    for r in rows:
        if r["launch"] != "herring-dedicated":
            continue
        ring = find("ring", r["task"], r["bytes"])
        colo = find("herring-colocated", r["task"], r["bytes"])
        ring2, colo2 = find("ring-2", r["task"], r["bytes"]), find("herring-colocated-2", r["task"], r["bytes"])
        comparisons.append({
            "task": r["task"], "model": r["model"], "bytes": r["bytes"],
            "dedicated": r["median"], "ring": ring and ring["median"], "colocated": colo and colo["median"],
            "ring_over_dedicated": ring and ring["median"] / r["median"],
            "theoretical_ring_over_dedicated": ring and ring["bound"] / r["bound"],
            "ring_over_colocated": ring and colo and ring["median"] / colo["median"],
            "ring2_over_colocated2": ring2 and colo2 and ring2["median"] / colo2["median"],
            "dedicated_of_bound": r["of_bound"], "ring_of_bound": ring and ring["of_bound"],
            "colocated_of_bound": colo and colo["of_bound"]})
    return {"cluster": _cluster_facts(cl), "rows": rows, "comparisons": comparisons, "sensitivity": sensitivity,
            "goals": _goals([r for r in rows if not r["tuned"]], comparisons, cl)}


def _cluster_facts(cl):
    return {"workers": len(cl.workers), "servers": len(cl.servers),
            "worker_goodput": min(cl.goodput(i)[0] for i in cl.workers),
            "worker_goodput_measured": all(cl.goodput(i)[1] for i in cl.workers),
            "worker_rate": cl.configured[cl.workers[0]],
            "server_rates": [cl.configured[i] for i in cl.servers],
            "server_goodputs": [cl.goodput(i)[0] for i in cl.servers]}


def _goals(rows, comps, cl):
    setup = f"Simulated {len(cl.workers)} worker hosts + {len(cl.servers)} server hosts"
    goal_cmp = next((c for c in comps if c["bytes"] == GOAL_SIZE and c["task"] == "allreduce"), None)
    if goal_cmp is None:
        allreduce = [c for c in comps if c["task"] == "allreduce"]
        goal_cmp = max(allreduce, key=lambda c: c["bytes"]) if allreduce else None
    out = []
    if goal_cmp is None:
        return out
    size = fmt_bytes(goal_cmp["bytes"])
    others = ", ".join(f"{fmt_bytes(c['bytes'])}: {c['ring_over_dedicated']:.2f}x" for c in comps
                       if c["task"] == "allreduce" and c is not goal_cmp and c["ring_over_dedicated"])
    theo = goal_cmp["theoretical_ring_over_dedicated"]
    r = goal_cmp["ring_over_dedicated"]
    out.append({"goal": f"{setup}: herring (dedicated servers) >= {GOAL_RATIO}x faster than ring allreduce over the "
                        f"same worker hosts",
                "target": f">= {GOAL_RATIO}x",
                "measured": (f"{size}: ring {fmt_time(goal_cmp['ring'])}, herring {fmt_time(goal_cmp['dedicated'])}"
                             + (f" ({others})" if others else "")
                             + (f"; the link bounds allow at most {theo:.2f}x" if theo else "")),
                "ratio": r, "met": None if r is None else r >= GOAL_RATIO})
    f = goal_cmp["dedicated_of_bound"]
    out.append({"goal": f"{setup}: herring (dedicated servers) >= {GOAL_BOUND_FRACTION:.0%} of the link bound",
                "target": f">= {GOAL_BOUND_FRACTION:.2f}x of the bound",
                "measured": (f"{size}: {f:.0%} of the bound ({fmt_time(goal_cmp['dedicated'])} vs bound "
                             f"{fmt_time(next(x['bound'] for x in rows if x['launch'] == 'herring-dedicated' and x['bytes'] == goal_cmp['bytes'] and x['task'] == 'allreduce'))}"
                             f" = N / measured link goodput)") if f else "not measured",
                "ratio": f, "met": None if f is None else f >= GOAL_BOUND_FRACTION})
    rc = goal_cmp["ring_over_colocated"]
    rc2 = goal_cmp["ring2_over_colocated2"]
    out.append({"goal": f"Simulated {len(cl.workers)} hosts, colocated servers: herring not slower than ring",
                "target": f">= {GOAL_COLOCATED:.1f}x",
                "measured": (f"{size}, 1 rank per host: ring {fmt_time(goal_cmp['ring'])}, herring "
                             f"{fmt_time(goal_cmp['colocated'])}" if rc else "not measured")
                + (f"; 2 ranks per host: {rc2:.2f}x" if rc2 else ""),
                "ratio": rc, "met": None if rc is None else (rc >= GOAL_COLOCATED and (rc2 is None or rc2 >= GOAL_COLOCATED))})
    return out


# -- training scenarios ---------------------------------------------------------------------------
def _train_record(launch):
    return next((r for r in launch["records"] if r["kind"] == "train"), None)


def _steady(times, skip):
    return times[skip:] if len(times) > skip + 1 else times


def analyse_r2sp(sc):
    cl = Cluster(sc)
    out = {"cluster": _cluster_facts(cl), "launches": []}
    for launch in sc["launches"]:
        rec = _train_record(launch)
        if not rec:
            continue
        times = rec["step_times"]
        steady = _steady(times, min(3, len(times) // 4))
        bound = link_bound(cl, "dedicated", rec["bytes"])
        out["launches"].append({"launch": launch["id"], "label": launch["label"],
                                "schedule": ("r2sp-mode" if rec.get("mode") == "r2sp-mode"
                                             else launch["env"].get("HERRING_SCHEDULE", "all")),
                                "params": rec["params"],
                                "bytes": rec["bytes"], "steps": len(times), "median": median(steady),
                                "mean": sum(steady) / len(steady) if steady else None,
                                "quartiles": quartiles(steady), "bound": bound,
                                "of_bound": bound / median(steady) if median(steady) else None,
                                "step_times": times, "links": _train_links(cl, rec)})
    a = next((x for x in out["launches"] if x["schedule"] == "all"), None)
    b = next((x for x in out["launches"] if x["schedule"] == "r2sp"), None)
    out["all_over_r2sp"] = a["median"] / b["median"] if a and b and b["median"] else None
    # Training mode: a worker's step is one update of its own batch, so per-worker step times
    # compare samples per second directly with the synchronous loop's. Its steps vary with where
    # the turns fall, so samples per second come from the mean step, not the median.
    m = next((x for x in out["launches"] if x["schedule"] == "r2sp-mode"), None)
    out["sync_over_mode"] = a["mean"] / m["mean"] if a and m and m["mean"] else None
    out["sync_over_mode_median"] = a["median"] / m["median"] if a and m and m["median"] else None
    return out


def _train_links(cl, rec):
    w = rec.get("link_window")
    if not w:
        return None
    steps = len(rec["step_times"])
    hosts = {}
    for i, name in enumerate(cl.hosts):
        b = w["hosts"][name]
        hosts[name] = {"role": cl.roles[i], "sent_per_step": b["sent"] / steps,
                       "received_per_step": b["received"] / steps,
                       "busy": max(b["sent"], b["received"]) * 8 / (w["seconds"] * cl.configured[i])
                       if cl.configured[i] else None}
    return {"hosts": hosts, "cpu_busy": w.get("cpu_busy")}


def analyse_hetero(sc):
    out = []
    for launch in sc["launches"]:
        for rec in launch["records"]:
            if rec["kind"] != "hetero":
                continue
            B, iv, f = rec["global_batch"], rec["interval"], rec["slow_factor"]
            n = rec["np"]
            eq, tu = rec["phases"]["equal"], rec["phases"]["tuned"]
            eq_steady = _steady(eq["step_times"], 1)
            tu_steady = _steady(tu["step_times"], 2 * iv)
            speeds = [1.0 / f if r in rec["slow_ranks"] else 1.0 for r in range(n)]
            # Compute alone (no communication): equal split waits for the slowest rank's B/n
            # samples; a split in proportion to speed makes every rank take B / sum(speeds).
            ideal = (B / n * max(1 / s for s in speeds)) / (B / sum(speeds))
            t_eq, t_tu = median(eq_steady), median(tu_steady)
            out.append({"task": rec["task"], "launch": launch["id"], "slow_factor": f, "slow_ranks": rec["slow_ranks"],
                        "np": n, "global_batch": B, "interval": iv, "sample_seconds": rec["sample_seconds"],
                        "equal_step": t_eq, "tuned_step": t_tu,
                        "equal_throughput": B / t_eq if t_eq else None, "tuned_throughput": B / t_tu if t_tu else None,
                        "gain": t_eq / t_tu if t_eq and t_tu else None,
                        "tuned_whole_phase_throughput": B * len(tu["step_times"]) / sum(tu["step_times"]),
                        "equal_whole_phase_throughput": B * len(eq["step_times"]) / sum(eq["step_times"]),
                        "ideal_compute_gain": ideal, "final_sizes": tu["sizes"][-1],
                        "equal_step_times": eq["step_times"], "tuned_step_times": tu["step_times"],
                        "tuned_sizes": tu["sizes"]})
    return out


def _settle_index(values, target, tolerance, window=5):
    """First index from which the rolling median of `window` values stays within `tolerance`
    (relative) of target to the end; None if never."""
    if not values or target is None:
        return None
    w = min(window, len(values))
    ok = [abs(median(values[k:k + w]) - target) <= tolerance * target for k in range(len(values) - w + 1)]
    for k in range(len(ok)):
        if all(ok[k:]):
            return k
    return None


def analyse_psld(sc):
    cl = Cluster(sc)
    slow_shard = None
    slowdown = next((l["env"].get("HERRING_SLOWDOWN") for l in sc["launches"] if l["env"].get("HERRING_SLOWDOWN")), None)
    if slowdown:
        slow_rank = int(slowdown.split(":")[0])
        slow_host = None
    else:
        slow_host = cl.slowest_server()
        slow_rank = None
    out = {"cluster": _cluster_facts(cl), "slowdown": slowdown, "launches": {}}
    for launch in sc["launches"]:
        rec = _train_record(launch)
        if not rec:
            continue
        times = rec["step_times"]
        layouts = rec.get("layouts") or []
        ranks = (layouts[-1].get("shard_ranks") if layouts else None) or []
        if slow_rank is not None and slow_rank in ranks:
            slow_shard = ranks.index(slow_rank)
        elif slow_host is not None and ranks:
            # Dedicated shards follow the server hosts in -H order: shard k runs on server host k.
            slow_shard = cl.servers.index(slow_host)
        shares = [l.get("shares") for l in layouts]
        versions = [l.get("version") for l in layouts]
        balanced = launch["env"].get("HERRING_BALANCER") == "psld"
        final = median(times[-max(3, len(times) // 3):])
        info = {"launch": launch["id"], "label": launch["label"], "balanced": balanced, "params": rec["params"],
                "bytes": rec["bytes"], "steps": len(times), "step_times": times,
                "elapsed": [w - rec["begin"] for w in rec.get("walls", [])], "versions": versions,
                "slow_shares": [s[slow_shard] if s and slow_shard is not None else None for s in shares],
                "final_shares": shares[-1] if shares else None, "links": _train_links(cl, rec)}
        if balanced:
            info["final"] = final
            info["first_step"] = times[0]
            k = _settle_index(times, final, 0.15)
            info["settled_step"] = k
            info["settled_seconds"] = info["elapsed"][k] if k is not None and info["elapsed"] else None
            ss = [x for x in info["slow_shares"] if x is not None]
            if ss:
                target = ss[-1]
                ks = next((k for k in range(len(ss)) if all(abs(x - target) <= 0.03 for x in ss[k:])), None)
                info["shares_settled_step"] = ks
                info["shares_settled_seconds"] = info["elapsed"][ks] if ks is not None and info["elapsed"] else None
            info["map_changes"] = len(set(v for v in versions if v is not None)) - 1
        else:
            info["median"] = median(_steady(times, min(3, len(times) // 4)))
        out["launches"][launch["id"]] = info
    static, psld = out["launches"].get("static"), out["launches"].get("psld")
    out["slow_shard"] = slow_shard
    out["static_over_psld"] = static["median"] / psld["final"] if static and psld and psld.get("final") else None
    n = (psld or static or {}).get("bytes")
    if slowdown and cl.servers and n:
        # The links are equal: what they allow is the step of servers that are all fast.
        out["bound_links"] = link_bound(cl, "dedicated", n)
    if not slowdown and cl.servers:
        if n:
            good = [cl.goodput(i)[0] for i in cl.servers]
            out["bound_static"] = link_bound(cl, "dedicated", n)
            out["bound_balanced"] = link_bound(cl, "dedicated", n, shares=[g / sum(good) for g in good])
            out["ideal_gain"] = out["bound_static"] / out["bound_balanced"]
            out["ideal_slow_share"] = good[cl.servers.index(slow_host)] / sum(good) if slow_host is not None else None
    return out


# -- latency scenario ------------------------------------------------------------------------------
LATENCY_GOAL_SIZE = 4 << 10
LATENCY_GOAL_RATIO = 3.0
RTT_GOAL_MESSAGE = 1            # the round trip the goal compares with: 1-byte messages


def _rtt_summary(sc):
    """Per message size: every measurement's median (before / after the launches) and, as the
    round trip the goal uses, the mean of those medians."""
    by_size = {}
    for m in sc.get("rtt") or []:
        for x in m["sizes"]:
            by_size.setdefault(x["bytes"], []).append(dict(x, when=m.get("when")))
    out = {}
    for n, ms in sorted(by_size.items()):
        meds = [x["median"] for x in ms]
        out[n] = {"bytes": n, "rtt": sum(meds) / len(meds), "measurements": ms}
    return out


def _per_iteration(rec):
    delta, n = rec.get("counters_delta"), rec.get("counted_iterations")
    if not delta or not n:
        return None
    per = {k: v / n for k, v in delta.items()}
    per["cycles_per_collective"] = per.get("cycles", 0) / rec.get("collectives_per_iteration", 3)
    return per


def analyse_latency(sc):
    cl = Cluster(sc)
    rtt = _rtt_summary(sc)
    ref = rtt.get(RTT_GOAL_MESSAGE)
    rows = []
    for launch in sc["launches"]:
        slots = launch.get("slots_per_host") or 1
        for rec in launch["records"]:
            if rec["kind"] != "allreduce":
                continue
            times = sorted(rec["times"])
            p25, p75 = quartiles(times)
            rows.append({"launch": launch["id"], "label": launch["label"], "slots": slots, "np": rec["np"],
                         "bytes": rec["bytes"], "median": rec["median"], "p25": p25, "p75": p75,
                         "min": times[0], "p90": times[min(len(times) - 1, int(0.9 * (len(times) - 1) + 0.5))],
                         "iterations": len(times),
                         "over_rtt": rec["median"] / ref["rtt"] if ref and ref["rtt"] else None,
                         "per_iteration": _per_iteration(rec)})
    rows.sort(key=lambda r: (r["bytes"], r["slots"], r["launch"]))
    return {"cluster": _cluster_facts(cl), "rtt": rtt, "rows": rows, "goals": _latency_goals(cl, rows, ref)}


def _latency_goals(cl, rows, ref):
    one = next((r for r in rows if r["bytes"] == LATENCY_GOAL_SIZE and r["slots"] == 1), None)
    two = next((r for r in rows if r["bytes"] == LATENCY_GOAL_SIZE and r["slots"] == 2), None)
    goal = (f"Across simulated hosts ({len(cl.workers)} hosts, {_mbit_text(cl.configured[cl.workers[0]])} tbf "
            f"links): {fmt_bytes(LATENCY_GOAL_SIZE)} allreduce within {LATENCY_GOAL_RATIO:g}x of the measured TCP "
            f"round trip between two namespaces")
    if not one or not ref:
        return [{"goal": goal, "target": f"<= {LATENCY_GOAL_RATIO:g}x", "measured": "not measured",
                 "ratio": None, "met": None}]
    ratio = one["median"] / ref["rtt"]
    meds = ", ".join(f"{x['when']} {fmt_time(x['median'])}" for x in ref["measurements"])
    measured = (f"{fmt_bytes(LATENCY_GOAL_SIZE)} allreduce, 1 rank per host: median {fmt_time(one['median'])} "
                f"over {one['iterations']} iterations; TCP round trip ({RTT_GOAL_MESSAGE}-byte ping-pong, same "
                f"hosts, same run): {fmt_time(ref['rtt'])} ({meds})")
    if two:
        measured += f"; 2 ranks per host: {fmt_time(two['median'])} ({two['median'] / ref['rtt']:.2f}x)"
    return [{"goal": goal, "target": f"<= {LATENCY_GOAL_RATIO:g}x", "measured": measured, "ratio": ratio,
             "met": ratio <= LATENCY_GOAL_RATIO}]


def _mbit_text(bps):
    if not bps:
        return "unshaped"
    return f"{bps / 1e9:g} Gbit/s" if bps >= 1e9 else f"{bps / 1e6:g} Mbit/s"


def analyse(data):
    """Everything the report needs, keyed by scenario id."""
    out = {}
    for sc in data["scenarios"]:
        if not sc.get("launches"):
            continue
        if sc["id"] == "goal":
            out["goal"] = analyse_goal(sc)
        elif sc["id"] == "r2sp":
            out["r2sp"] = analyse_r2sp(sc)
        elif sc["id"].startswith("psld"):
            out[sc["id"]] = analyse_psld(sc)
        elif sc["id"] == "latency":
            out["latency"] = analyse_latency(sc)
        het = analyse_hetero(sc)
        if het:
            out.setdefault("hetero", []).extend(het)
    return out
