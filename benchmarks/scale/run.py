"""The scale benchmark (issue 27): engine ranks (no framework, no numpy) at several N across
simulated hosts, today's design and the hierarchical one side by side in the same run, Horovod-gloo
beside them where it starts, calibration measurements for the model, the goals of the issue.

    .venv/bin/python -m benchmarks.scale.run                     # --preset full: 16..256 ranks on 16 hosts
    .venv/bin/python -m benchmarks.scale.run --preset smoke --out /tmp/s/scale.json
    .venv/bin/python -m benchmarks.scale.run --report benchmarks/results/scale.json   # docs only

Writes the results JSON (default benchmarks/results/scale.json), docs/benchmarks_scale.md,
docs/scale.md (the model) and docs/img/scale_*.png (or, for results outside benchmarks/results,
the pages beside the results). Every launch has a deadline; a failed launch is recorded with its
error and the run goes on. Exit status 1 if any herring launch of an available design failed."""

import argparse
import json
import os
import shlex
import subprocess
import sys
import time

from benchmarks.common import machine, peer_env
from benchmarks.common.paths import RESULTS_DIR, WORKERS_DIR, shown
from benchmarks.scale import designs, presets
from benchmarks.scale.results_io import load, save

WORKER = os.path.join(WORKERS_DIR, "scale_worker.py")
PEER_WORKER = os.path.join(WORKERS_DIR, "scale_gloo_worker.py")
FLOOR_WORKER = os.path.join(WORKERS_DIR, "lockstep_floor.py")


def log(msg):
    print(f"[scale {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def mem_available():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def fits(n, per_rank_bytes):
    need = n * per_rank_bytes * presets.MEMORY_MARGIN + presets.MEMORY_RESERVE_BYTES
    have = mem_available()
    return need <= have, (f"needs {need / 2**30:.1f} GiB with margin and reserve "
                          f"({n} x {per_rank_bytes / 2**20:.0f} MiB x {presets.MEMORY_MARGIN} + "
                          f"{presets.MEMORY_RESERVE_BYTES / 2**30:.0f} GiB), {have / 2**30:.1f} GiB available")


def one_job(cluster, kind, design, n, hosts, argv, env, out_dir, p, big_bytes):
    from benchmarks.scale.launch import LaunchError, run_job
    from benchmarks.scale.summary import summarize
    entry = {"kind": kind, "design": design, "n": n, "hosts": hosts, "env": env,
             "load_average": [round(x, 2) for x in os.getloadavg()], "big_bytes": big_bytes,
             "mem_available_bytes": mem_available()}
    deadline = presets.deadline_seconds(n)
    log(f"{kind} {design or ''} n={n} on {hosts} hosts (deadline {deadline} s, large allreduce "
        f"{big_bytes >> 20} MiB, load {entry['load_average']})")
    try:
        job = run_job(cluster, n, hosts, argv, env, os.path.join(out_dir, f"{kind}-{design}-{n}-{hosts}"),
                      deadline)
    except LaunchError as e:
        entry.update(status="failed", error=str(e))
        log(f"  failed: {e}")
        return entry
    entry["figures"] = summarize(job, n)
    entry["seconds"] = round(job["seconds"], 1)
    entry["spawn_seconds"] = round(job["spawn_seconds"], 2)
    entry["launcher"] = f"direct (nsenter into each host), store {job['store']}, -H {job['hosts_string']}"
    for key in ("error_kinds", "first_failure"):
        if job.get(key):
            entry[key] = job[key]
    if job["error"]:
        knob = designs.refused_knob(design, job["error"]) if kind == "herring" else None
        entry["status"] = "not available in this build" if knob else "failed"
        entry["error"] = (f"the engine refused {knob}: " if knob else "") + job["error"]
        log(f"  {entry['status']}: {entry['error'][:400]}")
    else:
        entry["status"] = "ok"
        f = entry["figures"]
        log(f"  ok in {entry['seconds']} s: init {f.get('init_seconds', 0):.2f} s "
            f"(engine {f.get('init_after_last_call_seconds', 0):.2f} s), tiny {1e3 * (f.get('tiny_cycle_seconds') or 0):.2f} ms, "
            f"large {f.get('big_seconds') or 0:.2f} s, tcp/rank {f['tcp_per_rank']['median'] if f.get('tcp_per_rank') else '-'}, "
            f"rss {((f.get('rss_per_rank_bytes') or {}).get('median') or 0) / 2**20:.0f} MiB, correct {f['every_result_equals_reference']}")
    return entry


def worker_args(worker, out_dir_placeholder, p, big_bytes, timeout, python=sys.executable):
    return [python, worker, out_dir_placeholder, str(p["warmup"]), str(p["iters"]), str(big_bytes),
            str(p["big_iters"]), str(timeout)]


def lockstep_floor(n, p):
    """benchmarks/workers/lockstep_floor.py at n processes (on the whole machine: the cores are
    what it measures, the namespaces would change nothing), or the error, recorded."""
    deadline = presets.deadline_seconds(n)
    try:
        out = subprocess.run([sys.executable, FLOOR_WORKER, str(n), str(p["iters"]), str(p["warmup"]), str(deadline)],
                             capture_output=True, text=True, timeout=deadline + 10, check=True)
        floor = json.loads(out.stdout)
        log(f"lockstep floor n={n}: {floor['median_seconds'] * 1e3:.2f} ms a cycle, "
            f"{floor['per_process_seconds'] * 1e6:.1f} us per process")
        return floor
    except (subprocess.SubprocessError, ValueError) as e:
        log(f"lockstep floor n={n}: failed: {e}")
        return {"n": n, "error": str(e)}


def measure(p, design_names, with_peer, workdir, launch_anyway=False):
    from tools.simcluster.cluster import SimulatedCluster
    from tools.simcluster.link_bound import measure_link
    from benchmarks.cluster.rtt import measure_rtt
    results = {"preset": p, "designs": {}, "jobs": [], "calibration": {}}
    for d in designs.DESIGNS:
        env, why = designs.availability(d, launch_anyway)
        results["designs"][d] = {"label": designs.DESIGNS[d]["label"], "knobs": designs.DESIGNS[d]["knobs"],
                                 "launched_with": env, "selected": d in design_names,
                                 "status": "not selected" if d not in design_names else (why or "available")}
    results["build_knobs"] = sorted(k for k in designs.build_knobs() if k in designs.DESIGN_KNOBS)
    hosts = p["hosts"]
    with SimulatedCluster(hosts=hosts, rate=None, start_timeout=120) as c:
        results["cluster"] = {"hosts": hosts, "setup_seconds": round(c.setup_seconds, 2), "describe": c.plan.describe()}
        log(f"cluster of {hosts} hosts up in {c.setup_seconds:.1f} s; measuring the link and the round trip")
        try:
            link = measure_link(c, 1, 0, seconds=2.0)
            results["calibration"]["link_bps"] = link.sent_bps
            results["calibration"]["link"] = link.describe()
        except Exception as e:  # noqa: BLE001 - recorded, the run goes on
            results["calibration"]["link_error"] = str(e)
        try:
            rtt = measure_rtt(c, 1, 0, sizes=(1,), iters=p["rtt_iters"], warmup=100)
            results["calibration"]["rtt"] = rtt
        except Exception as e:  # noqa: BLE001
            results["calibration"]["rtt_error"] = str(e)
        try:
            from benchmarks.scale.launch import probe_store
            results["calibration"]["store"] = probe_store(c, p.get("store_requests", 300))
        except Exception as e:  # noqa: BLE001
            results["calibration"]["store_error"] = str(e)
        base = {"HERRING_START_TIMEOUT_SECONDS": None, "HERRING_TIMEOUT_SECONDS": 120}
        # Calibration: the same tiny allreduce with every rank on ONE host (shared-memory control
        # plane, no TCP message): what a cycle costs per rank on these 2 cores (model.py).
        for n in p.get("calibration_ns", [16]):
            env = dict(base, HERRING_START_TIMEOUT_SECONDS=presets.start_timeout_seconds(n))
            results["jobs"].append(one_job(c, "calibration-one-host", "defaults", n, 1,
                                           worker_args(WORKER, "{out}", p, 0, presets.deadline_seconds(n)),
                                           env, workdir, p, 0))
        # The floor under any design's cycle here: N processes that each only wake once per cycle.
        results["calibration"]["lockstep_floor"] = [lockstep_floor(n, p) for n in sorted(set(p["ns"]))]
        for n in p["ns"]:
            for d in design_names:
                avail_env, why = designs.availability(d, launch_anyway)
                if avail_env is None:
                    results["jobs"].append({"kind": "herring", "design": d, "n": n, "hosts": hosts,
                                            "status": "not available in this build", "error": why})
                    continue
                ok, why_mem = fits(n, p["big_bytes"])
                big = p["big_bytes"] if ok else 0
                env = dict(base, HERRING_START_TIMEOUT_SECONDS=presets.start_timeout_seconds(n), **avail_env)
                entry = one_job(c, "herring", d, n, hosts,
                                worker_args(WORKER, "{out}", p, big, presets.deadline_seconds(n)), env, workdir, p, big)
                if not ok:
                    entry["big_skipped"] = why_mem
                results["jobs"].append(entry)
        peer_rank_bytes = presets.PEER_RANK_BYTES_GUESS
        for n in (p["peer_ns"] if with_peer else []):
            entry = {"kind": "horovod-gloo", "design": "peer", "n": n, "hosts": hosts}
            if not (os.access(peer_env.python(), os.X_OK) and os.path.exists(os.path.join(peer_env.cache_dir(), "stamp"))):
                entry.update(status="not started", error=f"the peer environment is not built ({peer_env.python()} "
                             f"missing, or its build has not finished: no stamp): bash {shown(peer_env.SETUP_SCRIPT)}")
                results["jobs"].append(entry)
                continue
            ok, why_mem = fits(n, peer_rank_bytes + p["big_bytes"])
            if not ok:
                ok_small, why_small = fits(n, peer_rank_bytes)
                if not ok_small:
                    entry.update(status="not started", error=f"memory: {why_small} (per-rank need "
                                 f"{'measured at a smaller N' if peer_rank_bytes != presets.PEER_RANK_BYTES_GUESS else 'estimated'})")
                    results["jobs"].append(entry)
                    log(f"horovod-gloo n={n}: not started ({entry['error']})")
                    continue
            big = p["big_bytes"] if ok else 0
            env = {"HOROVOD_GLOO_TIMEOUT_SECONDS": presets.deadline_seconds(n)}
            entry = one_job(c, "horovod-gloo", "peer", n, hosts,
                            worker_args(PEER_WORKER, "{out}", p, big, presets.deadline_seconds(n), peer_env.python()),
                            env, workdir, p, big)
            if not ok:
                entry["big_skipped"] = why_mem
            results["jobs"].append(entry)
            rss = (entry.get("figures") or {}).get("rss_per_rank_bytes")
            if rss:
                peer_rank_bytes = rss["max"]          # measured: replaces the estimate
    return results


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.scale.run", description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--preset", choices=sorted(presets.PRESETS), default="full")
    p.add_argument("--designs", nargs="+", default=list(designs.DESIGNS), choices=list(designs.DESIGNS))
    p.add_argument("--ns", type=int, nargs="+", help="override the preset's numbers of ranks")
    p.add_argument("--no-peer", action="store_true", help="skip Horovod-gloo")
    p.add_argument("--launch-anyway", action="store_true",
                   help="launch a design even if the build lacks a knob it requires (with the knobs it has)")
    p.add_argument("--out", default=os.path.join(RESULTS_DIR, "scale.json"))
    p.add_argument("--peer-only", action="store_true",
                   help="run only Horovod-gloo and put its launches into the existing --out results "
                        "(replacing its earlier ones), e.g. once the peer environment is built")
    p.add_argument("--report", metavar="RESULTS", help="only regenerate the pages and plots from saved results")
    p.add_argument("--no-doc", action="store_true", help="write the results only")
    args = p.parse_args(argv)
    if args.report:
        results = load(args.report)
        out = args.report
    elif args.peer_only:
        import tempfile
        results = load(args.out)
        preset = dict(results["preset"], ns=[], calibration_ns=[])
        with tempfile.TemporaryDirectory(prefix="herring-scale-") as workdir:
            peer = measure(preset, [], True, workdir)
        results["jobs"] = [j for j in results["jobs"] if j["kind"] != "horovod-gloo"] + peer["jobs"]
        results["peer_run"] = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                               "load_average": [round(x, 2) for x in os.getloadavg()],
                               "command": "python -m benchmarks.scale.run --peer-only"}
        results["machine"]["versions"].update(
            {k: v for k, v in machine.facts(with_peer=True)["versions"].items() if "peer" in k})
        out = args.out
        save(results, out)
        log(f"wrote {out} (Horovod-gloo launches replaced)")
    else:
        import tempfile
        preset = dict(presets.PRESETS[args.preset], name=args.preset)
        if args.ns:
            preset["ns"] = args.ns
        given = sys.argv[1:] if argv is None else argv
        started = time.time()
        load_start = [round(x, 2) for x in os.getloadavg()]
        with tempfile.TemporaryDirectory(prefix="herring-scale-") as workdir:
            results = measure(preset, args.designs, not args.no_peer, workdir, args.launch_anyway)
        results.update(command=" ".join(["python -m benchmarks.scale.run"] + [shlex.quote(a) for a in given]),
                       date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
                       wall_seconds=round(time.time() - started, 1),
                       load_average_start=load_start, load_average_end=[round(x, 2) for x in os.getloadavg()],
                       machine=machine.facts(with_peer=bool(preset["peer_ns"]) and not args.no_peer))
        out = args.out
        save(results, out)
        log(f"wrote {out}")
    if not args.no_doc:
        from benchmarks.scale.report import write_pages
        for path in write_pages(results, out):
            log(f"wrote {path}")
    failed = [j for j in results["jobs"] if j["kind"] == "herring" and j["status"] == "failed"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
