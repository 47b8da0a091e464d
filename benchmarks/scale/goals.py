"""The issue's acceptance goals, computed from a run's results (never typed in by hand):

1. steady-state cycle time of a cached tiny allreduce at the largest N within 3x of its time at
   the smallest N (the issue: 256 vs 16 ranks);
2. per-rank TCP sockets at the largest N at most 1/4 of the full mesh's (the full mesh: today's
   design measured in the same run at that N, else its formula (N - 1) x (1 + HERRING_TCP_STREAMS)
   connections per rank plus a listener);
3. time to init at the largest N under 10 s, judged twice: from the launch to every rank's init
   returned, which here includes starting N Pythons one after the other on 2 cores; and the
   engine's own part, from the last rank's init() call to every init returned (on a cluster the
   ranks start in parallel on their hosts, and this is what grows with the design)."""

CYCLE_RATIO_GOAL = 3.0
SOCKET_FRACTION_GOAL = 0.25
INIT_SECONDS_GOAL = 10.0
TCP_STREAMS_DEFAULT = 2


def full_mesh_tcp_per_rank(n, streams=TCP_STREAMS_DEFAULT):
    return (n - 1) * (1 + streams) + 1


def ok_jobs(results, kind="herring", design=None):
    return {j["n"]: j for j in results["jobs"]
            if j["kind"] == kind and (design is None or j["design"] == design) and j["status"] == "ok"}


def evaluate(results):
    """[{design, goal, n, value, target, met (True/False/None), detail}] for every selected design."""
    out = []
    ns = results["preset"]["ns"]
    lo, hi = min(ns), max(ns)
    today = ok_jobs(results, design="today")
    for design, info in results["designs"].items():
        if not info.get("selected"):
            continue
        jobs = ok_jobs(results, design=design)
        base = {"design": design, "n": hi}
        if info["status"] != "available":
            for goal in ("cycle", "sockets", "init", "init_engine"):
                out.append(dict(base, goal=goal, value=None, target=None, met=None, detail=info["status"]))
            continue
        a, b = jobs.get(lo), jobs.get(hi)
        if a and b and a["figures"].get("tiny_cycle_seconds") and b["figures"].get("tiny_cycle_seconds"):
            ratio = b["figures"]["tiny_cycle_seconds"] / a["figures"]["tiny_cycle_seconds"]
            out.append(dict(base, goal="cycle", value=ratio, target=CYCLE_RATIO_GOAL, met=ratio <= CYCLE_RATIO_GOAL,
                            detail=f"tiny allreduce cycle {b['figures']['tiny_cycle_seconds'] * 1e3:.2f} ms at {hi} "
                                   f"vs {a['figures']['tiny_cycle_seconds'] * 1e3:.2f} ms at {lo} ranks"))
        else:
            out.append(dict(base, goal="cycle", value=None, target=CYCLE_RATIO_GOAL, met=False,
                            detail=f"no successful launch at {lo if not a else hi} ranks"))
        if b and b["figures"].get("tcp_per_rank"):
            mine = b["figures"]["tcp_per_rank"]["median"]
            mesh_job = today.get(hi)
            if mesh_job and mesh_job["figures"].get("tcp_per_rank"):
                mesh, src = mesh_job["figures"]["tcp_per_rank"]["median"], "today's design measured"
            else:
                mesh, src = full_mesh_tcp_per_rank(hi), "full-mesh formula"
            frac = mine / mesh
            out.append(dict(base, goal="sockets", value=frac, target=SOCKET_FRACTION_GOAL,
                            met=frac <= SOCKET_FRACTION_GOAL,
                            detail=f"{mine:g} TCP sockets per rank (median) vs {mesh:g} of the full mesh ({src})"))
        else:
            out.append(dict(base, goal="sockets", value=None, target=SOCKET_FRACTION_GOAL, met=False,
                            detail=f"no successful launch at {hi} ranks"))
        if b and b["figures"].get("init_seconds") is not None:
            t = b["figures"]["init_seconds"]
            out.append(dict(base, goal="init", value=t, target=INIT_SECONDS_GOAL, met=t < INIT_SECONDS_GOAL,
                            detail=f"launch -> every init returned {t:.1f} s, of which {b['figures']['python_start_seconds']:.1f} s "
                                   f"starting {hi} Pythons and {b['figures']['init_after_last_call_seconds']:.1f} s from the last "
                                   f"rank's init() call"))
        else:
            out.append(dict(base, goal="init", value=None, target=INIT_SECONDS_GOAL, met=False,
                            detail=f"no successful launch at {hi} ranks"))
        engine_part = b["figures"].get("init_after_last_call_seconds") if b else None
        if engine_part is not None:
            out.append(dict(base, goal="init_engine", value=engine_part, target=INIT_SECONDS_GOAL,
                            met=engine_part < INIT_SECONDS_GOAL,
                            detail=f"from the last rank's init() call to every init returned: {engine_part:.1f} s"))
        else:
            out.append(dict(base, goal="init_engine", value=None, target=INIT_SECONDS_GOAL, met=False,
                            detail=f"no successful launch at {hi} ranks"))
    return out
