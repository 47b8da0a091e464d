"""The simulated-cluster benchmarks: each scenario of benchmarks/cluster/scenarios.py in its own
fresh SimulatedCluster (hosts as network namespaces, tbf-shaped links, an sshd per host, the real
horovodrun over ssh), then the results JSON (the input of `benchmarks.single_host.report
--cluster-results`), the plots (docs/img/cluster_*.png) and the markdown section
docs/benchmarks_cluster.md.

    .venv/bin/python -m benchmarks.cluster.run            # full run: benchmarks/results/cluster.json + docs
    .venv/bin/python -m benchmarks.cluster.run --preset smoke --out /tmp/c/cluster.json   # report in /tmp/c
    .venv/bin/python -m benchmarks.cluster.run --scenarios goal psld --out /tmp/c/r.json
    .venv/bin/python -m benchmarks.cluster.run --scenarios latency --out /tmp/c/latency.json \
        --merge-into benchmarks/results/cluster.json   # one scenario again, into the saved results + docs
    .venv/bin/python -m benchmarks.cluster.run --report-only    # the docs again from the saved results

Needs root (see docs/cluster.md). Every launch has a deadline; a launch that fails is recorded
with its error and output and the run goes on; a scenario whose cluster cannot be built is
recorded as failed."""

import argparse
import json
import os
import shlex
import sys
import tempfile
import time

from benchmarks.cluster.links import LinkSampler
from benchmarks.cluster.report import write_outputs
from benchmarks.cluster.rtt import measure_rtt
from benchmarks.cluster.scenarios import PRESETS, scenarios
from benchmarks.common import machine
from benchmarks.common.paths import RESULTS_DIR, ROOT, WORKERS_DIR, report_dir_for, shown
from benchmarks.common.worker_records import read_records
from tools.simcluster.cluster import SimulatedCluster, check_environment
from tools.simcluster.cluster_spec import ClusterSpec
from tools.simcluster.link_bound import measure_link
from tools.simcluster.processes import ClusterError

WORKER = os.path.join(WORKERS_DIR, "cluster_worker.py")
TRACE_BIN_SECONDS = 0.05


def log(msg):
    print(f"[cluster-bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _launch_env(launch):
    """herring plus the launch's knobs; every HOROVOD_*/HERRING_* of the caller removed, so each
    launch runs with the defaults except what the scenario sets."""
    env = {k: None for k in os.environ if k.startswith(("HOROVOD_", "HERRING_")) or k in ("PYTHONPATH",)}
    env.update({"HOROVOD_BACKEND": "herring", "OMP_NUM_THREADS": "1",
                "HERRING_BENCH_COLLECTIVE_TIMEOUT": str(int(launch.timeout))})
    env.update(launch.env)
    return env


def _link_stats(sampler, rec, spec):
    """Per-iteration bytes of every host for an allreduce record's windows, and a trace of its
    median iteration (for the plots)."""
    per_iter = [sampler.window(a, b) for a, b in rec.get("windows", [])]
    per_iter = [w for w in per_iter if w]
    if not per_iter:
        return None
    hosts = [h.name for h in spec.hosts]
    stats = {"iterations": per_iter}
    times = rec["times"]
    median_i = sorted(range(len(times)), key=lambda i: times[i])[len(times) // 2]
    a, b = rec["windows"][median_i]
    pad = 0.1
    stats["trace"] = sampler.trace(a - pad, b + pad, TRACE_BIN_SECONDS)
    stats["trace_window"] = [pad, pad + (b - a)]
    stats["hosts"] = hosts
    return stats


def _shown(argv, c, launch):
    """The launch as a person would type it (paths shortened, the cluster's key elided)."""
    argv = argv[:argv.index(sys.executable)]
    argv = ["horovodrun" if a.endswith("/horovodrun") else "<cluster user key>" if a == c.identity.user_key else a
            for a in argv]
    env = " ".join(f"{k}={v}" for k, v in dict(HOROVOD_BACKEND="herring", **launch.env).items())
    return f"{env} {shlex.join(argv)} python {shown(WORKER)} --plan PLAN --out OUT"


def run_launch(c, scenario, launch, workdir):
    plan_path = os.path.join(workdir, f"{scenario.id}-{launch.id}.plan.json")
    out_path = os.path.join(workdir, f"{scenario.id}-{launch.id}.jsonl")
    with open(plan_path, "w") as f:
        json.dump({"launch": launch.id, "tasks": launch.tasks}, f)
    argv = [sys.executable, WORKER, "--plan", plan_path, "--out", out_path]
    log(f"  {launch.id}: {launch.label} [{' '.join(f'{k}={v}' for k, v in launch.env.items())}]")
    started = time.monotonic()
    load_before = machine.load_average()
    sampler = LinkSampler(c)
    output, returncode, timed_out = "", None, False
    with sampler:
        try:
            run = c.horovodrun(argv, env=_launch_env(launch), cwd=ROOT, timeout=launch.timeout,
                               with_servers=launch.with_servers, slots_per_host=launch.slots_per_host)
            output, returncode = run.output, run.returncode
        except ClusterError as e:
            output, timed_out = str(e), "did not finish within" in str(e)
    seconds = time.monotonic() - started
    records, errors = read_records(out_path)
    for rec in records:
        if rec.get("kind") == "allreduce":
            rec["links"] = _link_stats(sampler, rec, c.spec)
        elif rec.get("kind") == "train" and rec.get("walls"):
            # Rank 0's last step ends when its own sums arrived; other hosts may still be receiving
            # theirs for a moment, and the counters are sampled: two more periods catch that (what
            # follows the loop is two 8-byte allreduces).
            rec["link_window"] = sampler.window(rec["begin"], rec["walls"][-1] + 2 * sampler.period)
    ok = returncode == 0 and not errors and len({r["task"] for r in records}) == len(launch.tasks)
    argv_shown = c.horovodrun_argv(argv, slots_per_host=launch.slots_per_host, with_servers=launch.with_servers)
    log(f"    {'ok' if ok else 'FAILED'} in {seconds:.0f} s, {len(records)} records"
        + ("" if ok else f"; exit {returncode}{', timed out' if timed_out else ''}; "
           + "; ".join(f"rank {e.get('rank')}: {e['error']}" for e in errors)))
    return {"id": launch.id, "label": launch.label, "env": launch.env, "with_servers": launch.with_servers,
            "slots_per_host": launch.slots_per_host, "tuned": launch.tuned, "ok": ok, "returncode": returncode, "timed_out": timed_out,
            "seconds": round(seconds, 1), "records": records, "errors": errors,
            "sampler_error": sampler.error, "load_average_before": load_before,
            "command": _shown(argv_shown, c, launch),
            "output_tail": "" if ok else output[-4000:]}


def _scenario_in(c, sc, out, workdir):
    """Runs scenario `sc` in cluster `c`, filling `out` as it goes (so a failure keeps what ran)."""
    started = time.monotonic()
    out["setup_seconds"] = round(c.setup_seconds, 2)
    log(f"scenario {sc.id}: {sc.title}")
    for label, src, dst in sc.links:
        try:
            m = measure_link(c, src, dst, seconds=3.0)
        except ClusterError as e:        # the bounds fall back to the configured rate, said so
            log(f"  link {label}: measurement FAILED: {e}")
            out["link_errors"].append(f"{label}: {e}")
            continue
        log(f"  link {label}: {m.describe()}")
        out["links"].append({"label": label, "src": m.src, "dst": m.dst, "sent_bps": m.sent_bps,
                             "configured_bps": m.configured_bps, "seconds": m.seconds})
    _measure_rtt(c, sc, out, "before")
    for launch in sc.launches:
        out["launches"].append(run_launch(c, sc, launch, workdir))
    _measure_rtt(c, sc, out, "after")
    out["seconds"] = round(time.monotonic() - started, 1)


def _measure_rtt(c, sc, out, when):
    """The scenario's TCP ping-pong between two of its hosts (before and after its launches, so the
    round trip brackets the jobs on this shared machine)."""
    if not sc.rtt:
        return
    r = sc.rtt
    try:
        m = measure_rtt(c, r["src"], r["dst"], sizes=r["sizes"], iters=r["iters"], warmup=r["warmup"])
    except (ClusterError, ValueError, OSError) as e:
        log(f"  TCP round trip ({when}): measurement FAILED: {e}")
        out["rtt_errors"].append(f"{when}: {e}")
        return
    m["when"] = when
    m["load_average"] = machine.load_average()
    log(f"  TCP round trip {m['src']} -> {m['dst']} ({when}): "
        + ", ".join(f"{x['bytes']} B median {x['median'] * 1e6:.1f} us (p99 {x['p99'] * 1e6:.0f} us)"
                    for x in m["sizes"]))
    out["rtt"].append(m)


def _groups(scs):
    """Scenarios grouped by cluster: a scenario that may reuse the previous one's cluster (same
    spec) joins its group; every other one gets a fresh cluster."""
    groups = []
    for sc in scs:
        if groups and sc.reuse_cluster and groups[-1][0].spec == sc.spec:
            groups[-1].append(sc)
        else:
            groups.append([sc])
    return groups


def run_group(group, workdir):
    spec = ClusterSpec.from_dict(group[0].spec)
    results = [{"id": sc.id, "title": sc.title, "spec": spec.to_dict(), "links": [], "link_errors": [],
                "rtt": [], "rtt_errors": [], "launches": [], "error": None, "shared_cluster": sc.reuse_cluster}
               for sc in group]
    current = 0
    try:
        with SimulatedCluster(spec=spec) as c:
            for current, sc in enumerate(group):
                _scenario_in(c, sc, results[current], workdir)
    except ClusterError as e:
        log(f"  cluster FAILED: {e}")
        for r in results[current:]:
            r["error"] = str(e)
    return results


def run(preset, only, out_json, workdir):
    started = time.monotonic()
    facts = machine.facts(with_peer=False)
    facts["load_average_start"] = machine.load_average()
    data = {"meta": {"command": " ".join(["python -m benchmarks.cluster.run"] + sys.argv[1:]), "preset": preset,
                     "results_path": shown(out_json)},
            "machine": facts, "scenarios": []}
    for group in _groups(scenarios(preset, only)):
        data["scenarios"].extend(run_group(group, workdir))
    data["machine"]["load_average_end"] = machine.load_average()
    data["meta"]["seconds"] = round(time.monotonic() - started, 1)
    return data


def merge_results(target, data):
    """The saved results at `target` with the scenarios of `data` (a new run) in them: a scenario of
    the same id is replaced where it was, a new one appended; the others, the machine facts and the
    original run's meta are kept, and meta["merged"] says what was merged, when and how."""
    with open(target) as f:
        base = json.load(f)
    new = {s["id"]: s for s in data["scenarios"]}
    kept = [new.pop(s["id"]) if s["id"] in new else s for s in base["scenarios"]]
    base["scenarios"] = kept + list(new.values())
    base["meta"]["results_path"] = shown(target)
    merged = [m for m in base["meta"].get("merged", []) if not set(m["scenarios"]) <= {s["id"] for s in data["scenarios"]}]
    merged.append({"scenarios": [s["id"] for s in data["scenarios"]], "command": data["meta"]["command"],
                   "date": data["machine"].get("date"), "seconds": data["meta"].get("seconds"),
                   "versions": data["machine"].get("versions"),
                   "load_average_start": data["machine"].get("load_average_start"),
                   "load_average_end": data["machine"].get("load_average_end")})
    base["meta"]["merged"] = merged
    return base


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.cluster.run",
                                description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--preset", choices=sorted(PRESETS), default="full")
    p.add_argument("--scenarios", nargs="+", help="scenario ids of the preset (default: all)")
    p.add_argument("--out", default=os.path.join(RESULTS_DIR, "cluster.json"),
                   help="results JSON (for benchmarks.single_host.report --cluster-results)")
    p.add_argument("--markdown", default=None, help="markdown section (default: benchmarks_cluster.md beside --out, "
                   "or in docs/ for results in benchmarks/results/)")
    p.add_argument("--img-dir", default=None, help="plots (default: img/ beside the markdown)")
    p.add_argument("--report-only", action="store_true",
                   help="do not run: rewrite the JSON's derived parts, plots and markdown from --out's raw results")
    p.add_argument("--merge-into", default=None, metavar="RESULTS_JSON",
                   help="after the run, put its scenarios into these saved results (replacing scenarios of the "
                        "same id, the others kept as they were) and rewrite their report (markdown and plots "
                        "beside them, as --report-only would): one scenario again without re-running the rest")
    args = p.parse_args(argv)
    if args.merge_into and args.report_only:
        p.error("--merge-into runs scenarios; it cannot go with --report-only")
    out_json = os.path.abspath(args.out)
    out_dir = os.path.dirname(out_json)
    markdown = os.path.abspath(args.markdown or os.path.join(report_dir_for(out_json), "benchmarks_cluster.md"))
    img_dir = os.path.abspath(args.img_dir or os.path.join(os.path.dirname(markdown), "img"))
    if args.report_only:
        with open(out_json) as f:
            data = json.load(f)
        data["meta"]["results_path"] = shown(out_json)   # where it is now, wherever it was written
    else:
        try:
            check_environment()
        except ClusterError as e:
            print(f"cannot run the simulated cluster here: {e}", file=sys.stderr)
            return 3
        os.makedirs(out_dir, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="herring-cluster-bench-") as workdir:
            os.chmod(workdir, 0o755)
            data = run(args.preset, args.scenarios, out_json, workdir)
    paths = write_outputs(data, out_json, markdown, img_dir)
    if args.merge_into:
        target = os.path.abspath(args.merge_into)
        merged = merge_results(target, data)
        md = os.path.join(report_dir_for(target), "benchmarks_cluster.md")
        paths += write_outputs(merged, target, md, os.path.join(os.path.dirname(md), "img"))
    for path in paths:
        print(path)
    failed = [f"{s['id']}/{l['id']}" for s in data["scenarios"] for l in s["launches"] if not l["ok"]]
    failed += [s["id"] for s in data["scenarios"] if s.get("error")]
    if failed:
        log(f"failed: {', '.join(failed)}")
        return 1
    log("report rewritten from saved results" if args.report_only else f"done in {data['meta']['seconds'] / 60:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
