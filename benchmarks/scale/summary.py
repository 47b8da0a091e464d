"""From what every rank of one job wrote (benchmarks/workers/scale_worker.py) to the figures the
report shows: time to init, the tiny allreduce's steady-state cycle time, the large allreduce,
sockets and resident memory per rank, and whether every rank's results equalled the reference."""

import statistics

# The figures every successful herring job must have (the test checks each is present).
FIGURES = ("init_seconds", "init_after_last_call_seconds", "tiny_cycle_seconds", "sockets_per_rank",
           "tcp_per_rank", "rss_per_rank_bytes")


def _q(values, q):
    values = sorted(values)
    if not values:
        return None
    k = (len(values) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def _spread(values):
    return {"median": _q(values, 0.5), "min": min(values), "max": max(values)} if values else None


def summarize(job, n):
    """Figures of one job (launch.run_job's result) of n ranks."""
    recs = job["records"]
    out = {"ranks_reported": len(recs), "error": job.get("error")}
    complete = [recs[r] for r in range(n) if r in recs and "init_returned" in recs[r]]
    launched = job.get("launched_at")
    if len(complete) == n and launched:
        last_return = max(r["init_returned"] for r in complete)
        out["init_seconds"] = last_return - launched
        # The engine's own part: from the moment the last rank called init() (every rank is up
        # and has imported the engine) to the last return. The rest is starting N Pythons.
        out["init_after_last_call_seconds"] = last_return - max(r["imported"] for r in complete)
        out["python_start_seconds"] = max(r["imported"] for r in complete) - launched
        if all("cpu_init_returned" in r for r in complete):
            # CPU, not wall: what N ranks sharing P cores each cost the machine to start and to init.
            out["cpu_to_import_per_rank_seconds"] = _spread([r["cpu_imported"] for r in complete])
            out["cpu_in_init_per_rank_seconds"] = _spread([r["cpu_init_returned"] - r["cpu_imported"] for r in complete])
    tiny = [r["tiny"] for r in complete if "tiny" in r]
    if len(tiny) == n:
        samples = [t for x in tiny for t in x["times"]]
        # One cycle is over when the slowest rank has its result: per iteration, the max over ranks.
        per_iter = [max(x["times"][i] for x in tiny) for i in range(min(len(x["times"]) for x in tiny))]
        out["tiny_cycle_seconds"] = _q(samples, 0.5)
        out["tiny_cycle_p25_p75"] = [_q(samples, 0.25), _q(samples, 0.75)]
        out["tiny_cycle_slowest_rank_seconds"] = _q(per_iter, 0.5)
        out["tiny_iterations"] = len(per_iter)
        if all("cpu_per_iteration_seconds" in x for x in tiny):
            # What one cycle costs each process (all its threads): with N processes on P cores, a
            # cycle cannot be shorter than the sum of these over the ranks / P.
            out["tiny_cpu_per_iteration_per_rank_seconds"] = _spread([x["cpu_per_iteration_seconds"] for x in tiny])
            out["tiny_switches_per_iteration_per_rank"] = {
                "voluntary": _spread([x["voluntary_switches_per_iteration"] for x in tiny]),
                "involuntary": _spread([x["involuntary_switches_per_iteration"] for x in tiny])}
    big = [r["big"] for r in complete if "big" in r]
    if big and len(big) == n:
        per_iter = [max(x["times"][i] for x in big) for i in range(min(len(x["times"]) for x in big))]
        out["big_bytes"] = big[0]["bytes"]
        out["big_seconds"] = _q(per_iter, 0.5)
        out["big_iterations"] = len(per_iter)
    socks = [r["sockets"] for r in complete if "sockets" in r]
    if len(socks) == n:
        out["sockets_per_rank"] = _spread([s["sockets"] for s in socks])
        out["tcp_per_rank"] = _spread([s["tcp"] for s in socks])
        out["tcp_established_per_rank"] = _spread([s["tcp_established"] for s in socks])
        out["unix_per_rank"] = _spread([s["unix"] for s in socks])
        after = [r["sockets_after_big"]["tcp"] for r in complete if "sockets_after_big" in r]
        if after:
            out["tcp_per_rank_after_big"] = _spread(after)
    mem = [r["memory"] for r in complete if "memory" in r]
    if len(mem) == n:
        out["rss_per_rank_bytes"] = _spread([m["VmRSS"] for m in mem])
        out["rss_anon_per_rank_bytes"] = _spread([m.get("RssAnon", 0) for m in mem])
        out["rss_shmem_per_rank_bytes"] = _spread([m.get("RssShmem", 0) for m in mem])
        after = [r["memory_after_big"]["VmHWM"] for r in complete if "memory_after_big" in r]
        if after:
            out["peak_rss_with_big_bytes"] = _spread(after)
    # Correctness: every rank's every check, named when one differs.
    wrong = []
    for r in range(n):
        rec = recs.get(r)
        if rec is None:
            wrong.append(f"rank {r}: wrote no results")
            continue
        for part in ("tiny", "big"):
            if part in rec and not rec[part]["ok"]:
                wrong.append(f"rank {r} {part}: {rec[part]['error']}")
    out["every_result_equals_reference"] = not wrong and len(tiny) == n
    out["wrong"] = wrong[:10]
    counters = recs.get(0, {}).get("counters", {})
    out["rank0_counters"] = {k: v for k, v in counters.items()
                             if any(w in k for w in ("socket", "connection", "cycle", "coordinator", "tree", "leader", "join",
                                                     "with_bits", "host_sum"))}
    # The engine's own socket counters, when the build has them (a cross-check of the /proc count).
    keys = sorted({k for r in recs.values() for k in r.get("counters", {}) if "socket" in k or "connection" in k})
    if keys:
        out["engine_socket_counter"] = {k: _spread([r["counters"][k] for r in recs.values() if k in r.get("counters", {})])
                                        for k in keys}
    return out


def median(values):
    return statistics.median(values) if values else None
