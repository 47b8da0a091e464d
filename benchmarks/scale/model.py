"""A cost model of the engine's scaling, calibrated on the scale benchmark's runs on this machine,
predicting the same figures (tiny-allreduce cycle, 64 MiB allreduce, time to init, sockets and
memory per rank) at 1k, 2k and 16k ranks for today's design and the hierarchical one, on links of
100 and 400 Gbit/s, and checking itself against the Herring paper's BERT-large figure (85%
scaling efficiency at 2048 V100 GPUs). docs/scale.md explains every equation; this file is the
arithmetic. Everything is in seconds, bytes and bits per second.

Calibration (from the results JSON of benchmarks/scale/run.py):
- c_rank: CPU time one rank spends per tiny-allreduce cycle, from the one-host calibration
  launches (shared-memory control plane, no TCP): on P cores N ranks take N c_rank / P.
- L: one-way latency of a hop between hosts, half the measured 1-byte TCP round trip.
- c_msg: CPU cost of one TCP control message at the busiest rank, fitted to today's design's
  cycle times across N after taking out the ranks' own work and the latency.
- c_get: one request to the rendezvous store (measured from another host, store_probe.py).
- c_conn: one TCP connection set-up, fitted to today's init times after the store's part.
- beta: CPU seconds per byte per rank of the large allreduce's local work (copies, reduction),
  fitted to the 64 MiB allreduce across N (all ranks' local work shares the P cores).
- sockets and RSS per rank: linear fits in the number of peers a rank connects to.
"""

import math

GIB = 1 << 30
MIB = 1 << 20
TCP_STREAMS = 2                 # HERRING_TCP_STREAMS' default: data streams per peer
RANKS_PER_HOST_AT_SCALE = 8     # GPU hosts (p3dn.24xlarge: 8 V100 per host, one rank each)
SCALES = (1024, 2048, 16384)
LINKS_BPS = (100e9, 400e9)


def _ok(results, kind, design=None, hosts=None):
    return sorted((j for j in results["jobs"] if j["kind"] == kind and j["status"] == "ok"
                   and (design is None or j["design"] == design) and (hosts is None or j["hosts"] == hosts)),
                  key=lambda j: j["n"])


def _lstsq(rows, ys):
    """Least squares for y = rows . x (tiny normal equations; no numpy needed here)."""
    k = len(rows[0])
    a = [[sum(r[i] * r[j] for r in rows) for j in range(k)] for i in range(k)]
    b = [sum(r[i] * y for r, y in zip(rows, ys)) for i in range(k)]
    for i in range(k):                                   # Gauss-Jordan with partial pivoting
        p = max(range(i, k), key=lambda r: abs(a[r][i]))
        a[i], a[p], b[i], b[p] = a[p], a[i], b[p], b[i]
        if abs(a[i][i]) < 1e-300:
            return [0.0] * k
        for r in range(k):
            if r != i:
                f = a[r][i] / a[i][i]
                a[r] = [x - f * y for x, y in zip(a[r], a[i])]
                b[r] -= f * b[i]
    return [b[i] / a[i][i] for i in range(k)]


def _fit_slope(xs, ys):
    """y = s x through the origin (a non-negative slope)."""
    den = sum(x * x for x in xs)
    return max(0.0, sum(x * y for x, y in zip(xs, ys)) / den) if den else 0.0


def calibrate(results):
    """The model's parameters from a run's results, each with where it came from."""
    cal = results.get("calibration", {})
    cores = results.get("machine", {}).get("cores") or 2
    p = {"cores": cores, "sources": {}}
    rtt = cal.get("rtt", {}).get("sizes", [{}])
    rtt_median = rtt[0].get("median") if rtt else None
    p["L"] = rtt_median / 2 if rtt_median else 30e-6
    p["sources"]["L"] = ("half the median 1-byte TCP round trip between two simulated hosts"
                         if rtt_median else "facts.md's 30 us round trip (no measurement in this run)")
    p["link_bps_here"] = cal.get("link_bps")
    one_host = _ok(results, "calibration-one-host")
    pts = [(j["n"], j["figures"]["tiny_cycle_seconds"]) for j in one_host if j["figures"].get("tiny_cycle_seconds")]
    p["c_rank"] = _fit_slope([n for n, _ in pts], [t for _, t in pts]) * cores if pts else 20e-6
    p["sources"]["c_rank"] = (f"slope of the one-host tiny cycle over N ({', '.join(f'{n}: {t * 1e3:.2f} ms' for n, t in pts)}) x {cores} cores"
                              if pts else "assumed 20 us (no one-host calibration in this run)")
    today = _ok(results, "herring", "today")
    rows, ys = [], []
    for j in today:
        f = j["figures"]
        if f.get("tiny_cycle_seconds"):
            n = j["n"]
            log_h = _log_hosts(j.get("hosts", 1))
            rest = f["tiny_cycle_seconds"] - n * p["c_rank"] / cores - 2 * p["L"] - log_h * p["L"]
            rows.append([2.0 * (n - 1) + 2.0 * log_h])
            ys.append(rest)
    p["c_msg"] = max(1e-6, _lstsq(rows, ys)[0]) if rows else 5e-6
    p["sources"]["c_msg"] = (f"least squares over today's {len(rows)} launches: cycle - N c_rank / P - (2 + log2 H) L = (2 (N - 1) + 2 log2 H) c_msg"
                             if rows else "assumed 5 us")
    store = cal.get("store", {})
    p["c_get"] = store.get("get", 1e-3)
    p["sources"]["c_get"] = ("median GET to Horovod's RendezvousServer from another host (store_probe.py)"
                             if store else "assumed 1 ms")
    # Init (the engine's part): a N + b N^2 on this machine, both non-negative. a N: every rank's
    # own work (its rendezvous round, listening, its handshakes' CPU) run in turn on P cores, so
    # one rank's is a P; b N^2: what grows with the pairs: the store's requests (one process
    # serves all N^2, on a cluster too: c_get, at most b) and the connections (N (N - 1)(1 + S)
    # of them on P cores: the rest of b).
    pts = [(j["n"], j["figures"]["init_after_last_call_seconds"]) for j in today
           if j["figures"].get("init_after_last_call_seconds") is not None]
    a, b = _lstsq([[n, n * n] for n, _ in pts], [t for _, t in pts]) if len(pts) >= 2 else (0.0, 0.0)
    if b < 0 or a < 0:
        a, b = (_fit_slope([n for n, _ in pts], [t for _, t in pts]), 0.0) if b < 0 else \
               (0.0, _fit_slope([n * n for n, _ in pts], [t for _, t in pts]))
    p["init_a"], p["init_b"] = a, b
    p["c_init_rank"] = a * cores
    # The store's cost per request cannot exceed any launch's whole init spread over its N^2
    # requests: an upper bound consistent with every run, used when the fit leaves b ~ 0 (the
    # runs up to 128 ranks are close to linear in N, so the fit alone cannot see the N^2 term).
    bound = min(t / (n * n) for n, t in pts) if pts else p["c_get"]
    p["c_get_store"] = min(p["c_get"], max(b, bound))
    p["c_conn"] = max(0.0, (b - p["c_get_store"]) * cores / (1 + TCP_STREAMS)) if pts else 50e-6
    if pts:     # the store's share is now counted in the N^2 term: take it out of the linear one
        a_rest = [max(0.0, t - n * n * p["c_get_store"]) for n, t in pts]
        p["c_init_rank"] = _fit_slope([n for n, _ in pts], a_rest) * cores
        p["sources"]["c_init_rank"] = (f"P x the slope over N of init - N^2 c_get_store (today's {len(pts)} launches; "
                                       f"the free fit init = a N + b N^2 gave a = {a * 1e3:.3g} ms, b = {b * 1e6:.3g} us)")
    p["sources"]["c_init_rank"] = (f"a x P, from init after the last init() call = a N + b N^2 fitted on today's "
                                   f"{len(pts)} launches (a = {a * 1e3:.3g} ms, b = {b * 1e6:.3g} us)" if pts else "none")
    p["sources"]["c_get_store"] = ("the store's cost per request, an upper bound: the probe's GET, capped by the "
                                   "smallest init / N^2 of the runs (the store's N^2 requests cannot take longer than the whole init)")
    p["sources"]["c_conn"] = "(b - c_get_store) P / (1 + S): the rest of the N^2 term, per connection"
    xs, ys = [], []
    for j in today:
        f = j["figures"]
        if f.get("big_seconds"):
            xs.append(j["n"] * f["big_bytes"] / cores)
            ys.append(f["big_seconds"])
    p["beta"] = _fit_slope(xs, ys) if xs else 1.0 / 2e9
    p["sources"]["beta"] = (f"slope of the large allreduce's time over N x bytes / P ({len(xs)} launches of today's design)"
                            if xs else "assumed 0.5 ns per byte (2 GB/s per rank)")
    rows_s, ys_s, rows_m, ys_m = [], [], [], []
    for j in today:
        f = j["figures"]
        if f.get("tcp_per_rank"):
            rows_s.append([1.0, j["n"] - 1.0])
            ys_s.append(f["tcp_per_rank"]["median"])
        if f.get("rss_per_rank_bytes"):
            rows_m.append([1.0, j["n"] - 1.0])
            ys_m.append(f["rss_per_rank_bytes"]["median"])
    p["sock0"], p["sock_per_peer"] = _lstsq(rows_s, ys_s) if len(rows_s) >= 2 else (1.0, 1.0 + TCP_STREAMS)
    p["sources"]["sockets"] = (f"fit to today's TCP sockets per rank over N ({len(rows_s)} launches)"
                               if len(rows_s) >= 2 else "the full-mesh formula")
    p["rss0"], p["rss_per_peer"] = _lstsq(rows_m, ys_m) if len(rows_m) >= 2 else (60 * MIB, 0.0)
    p["sources"]["rss"] = f"fit to today's RSS per rank over N ({len(rows_m)} launches)"
    p["fits"] = {"today_cycle": [(j["n"], j["figures"].get("tiny_cycle_seconds")) for j in today]}
    return p


# --- predictions on a real cluster: one core per rank, RANKS_PER_HOST_AT_SCALE ranks per host -----

def _log_hosts(hosts):
    return math.ceil(math.log2(hosts)) if hosts > 1 else 0


def _host_sums_exchange(p, hosts):
    """The tiny allreduce's data across hosts in today's design (ops/small_exchange.h): the hosts'
    leaders gather the host sums with Bruck's allgather, ceil(log2 H) rounds of one send and one
    receive each. The hierarchical plane has no such term: the host sums of a cached small
    allreduce ride the leaders' tree with the bit vectors and the total comes down with the result
    (engine/host_sums_in_tree.cc; the tiny allreduce's 32 bytes per host fit the bound at rank 0
    up to 2048 hosts, the most the predictions have)."""
    return _log_hosts(hosts) * (p["L"] + 2 * p["c_msg"])


def predict(p, n, link_bps, design, ranks_per_host=RANKS_PER_HOST_AT_SCALE, big_bytes=64 * MIB):
    hosts = max(1, n // ranks_per_host)
    log_h = _log_hosts(hosts)
    if design == "today":
        # Star: rank 0 receives N - 1 bit vectors and answers N - 1 ranks, one message at a time.
        cycle = p["c_rank"] + 2 * p["L"] + 2 * (n - 1) * p["c_msg"] + _host_sums_exchange(p, hosts)
        # Rendezvous: every rank reads every record from one store; then N (1 + S) connections each.
        init = p["c_init_rank"] + n * n * p["c_get_store"] + (n - 1) * (1 + TCP_STREAMS) * p["c_conn"]
        peers = n - 1
        sockets = p["sock0"] + p["sock_per_peer"] * peers
    else:
        # Shared memory inside the host (one more meeting of the local ranks), then the leaders'
        # binomial tree (engine/control_tree.h): the AND goes up log2(H) hops and the result down
        # as many, each a message's latency and its cost at the receiver; the host sums and their
        # total travel in those messages.
        cycle = 2 * p["c_rank"] + 2 * log_h * (p["L"] + p["c_msg"])
        # One record per host, read by every host leader; connections only on first use.
        init = p["c_init_rank"] + hosts * hosts * p["c_get_store"] + log_h * p["c_conn"]
        # A leader's tree peers, plus one set of streams per host pair shared by the local ranks.
        peers = log_h + (hosts - 1) / ranks_per_host
        sockets = 1 + log_h + (hosts - 1) * (1 + TCP_STREAMS) / ranks_per_host
    # The large allreduce (herring's parameter-server path, the same data plane in both designs):
    # each rank's local work (copy in, reduce its slice, copy out) in parallel, plus the host's
    # link carrying its sum out and the total back (G each way, full duplex), plus the latency of
    # the exchange with every other host's shard.
    big = p["beta"] * big_bytes + big_bytes * 8 / link_bps + 2 * p["L"] + cycle
    rss = p["rss0"] + p["rss_per_peer"] * peers
    return {"n": n, "hosts": hosts, "design": design, "link_bps": link_bps, "tiny_cycle_seconds": cycle,
            "big_seconds": big, "init_seconds": init, "tcp_per_rank": sockets, "rss_per_rank_bytes": rss}


def predictions(p):
    return [predict(p, n, link, d) for n in SCALES for link in LINKS_BPS for d in ("today", "hierarchical")]


# --- the check against the Herring paper ------------------------------------------------------

BERT_PARAMETERS = 340e6          # BERT-large
BERT_GPUS = 2048                 # 256 hosts x 8 V100 (p3dn.24xlarge, 100 Gbit/s EFA)
PAPER_EFFICIENCY = 0.85


def bert_check(p, grad_bytes_per_param=2, link_bps=100e9, compute_seconds=(0.25, 0.5, 1.0),
               backward_fraction=2 / 3, buffers_per_step=None):
    """Scaling efficiency of BERT-large at 2048 GPUs predicted by the model (hierarchical design),
    for a range of per-step compute times (the paper's step time is not in our notes: the range
    brackets V100 steps of BERT-large at common per-GPU batches), between two bounds:
    - no overlap: every byte's reduction after the backward pass;
    - overlap: the reduction hidden behind the backward pass (backward_fraction of compute), only
      what sticks out of it and the last buffer's cycle exposed."""
    g = BERT_PARAMETERS * grad_bytes_per_param
    fusion = 64 * MIB
    buffers = buffers_per_step or math.ceil(g / fusion)
    pred = predict(p, BERT_GPUS, link_bps, "hierarchical", big_bytes=fusion)
    # On GPUs the local work is the GPUs' (NVLink) and copies to the host; use the link term and
    # the control cycles only (the CPU beta of this machine does not apply to V100s).
    per_buffer = fusion * 8 / link_bps + 2 * p["L"] + pred["tiny_cycle_seconds"]
    comm = buffers * per_buffer
    rows = []
    for tc in compute_seconds:
        no_overlap = tc / (tc + comm)
        exposed = max(0.0, comm - backward_fraction * tc) + per_buffer
        overlap = tc / (tc + exposed)
        rows.append({"compute_seconds": tc, "comm_seconds": comm, "buffers": buffers,
                     "efficiency_no_overlap": no_overlap, "efficiency_overlap": overlap,
                     "paper_within_band": min(no_overlap, overlap) <= PAPER_EFFICIENCY <= max(no_overlap, overlap)})
    return {"gradient_bytes": g, "link_bps": link_bps, "per_buffer_seconds": per_buffer, "rows": rows,
            "paper": PAPER_EFFICIENCY, "gpus": BERT_GPUS}


def replay(p, results):
    """The model on this machine's own launches (P cores shared by all N ranks), beside what was
    measured: how well the calibrated terms reproduce the runs."""
    out = []
    cores = p["cores"]
    for j in _ok(results, "herring", "today"):
        n, f = j["n"], j["figures"]
        model_cycle = (n * p["c_rank"] / cores + 2 * p["L"] + 2 * (n - 1) * p["c_msg"]
                       + _host_sums_exchange(p, j.get("hosts", 1)))
        model_init = p["init_a"] * n + p["init_b"] * n * n
        model_big = p["beta"] * n * f["big_bytes"] / cores if f.get("big_bytes") else None
        out.append({"n": n, "cycle": (f.get("tiny_cycle_seconds"), model_cycle),
                    "init": (f.get("init_after_last_call_seconds"), model_init),
                    "big": (f.get("big_seconds"), model_big)})
    return out


def predicted_goals(p, hosts=16, small=16, large=256, link_bps=100e9):
    """The issue's three goals as the model predicts them for a cluster with a core per rank and
    the suite's layout (`hosts` hosts, N / hosts ranks each), per design."""
    from benchmarks.scale.goals import CYCLE_RATIO_GOAL, INIT_SECONDS_GOAL, SOCKET_FRACTION_GOAL, full_mesh_tcp_per_rank
    out = []
    for design in ("today", "hierarchical"):
        a = predict(p, small, link_bps, design, ranks_per_host=small // hosts)
        b = predict(p, large, link_bps, design, ranks_per_host=large // hosts)
        ratio = b["tiny_cycle_seconds"] / a["tiny_cycle_seconds"]
        frac = b["tcp_per_rank"] / full_mesh_tcp_per_rank(large)
        out.append({"design": design, "cycle_ratio": ratio, "cycle_met": ratio <= CYCLE_RATIO_GOAL,
                    "socket_fraction": frac, "sockets_met": frac <= SOCKET_FRACTION_GOAL,
                    "init_seconds": b["init_seconds"], "init_met": b["init_seconds"] < INIT_SECONDS_GOAL,
                    "cycle_small": a["tiny_cycle_seconds"], "cycle_large": b["tiny_cycle_seconds"],
                    "tcp_large": b["tcp_per_rank"]})
    return out
