"""The benchmark command (what benchmarks/run.sh runs): runs every stack on the same workloads in
one run, measures this machine's memory bandwidth, and writes the report (markdown + PNG plots)
and the raw results.

    .venv/bin/python -m benchmarks.single_host.run        # full run: docs/benchmarks.md, docs/img,
                                                          # benchmarks/results/single_host.json
    .venv/bin/python -m benchmarks.single_host.run --preset quick     # a few minutes
    .venv/bin/python -m benchmarks.single_host.run --preset smoke --out /tmp/b/benchmarks.md   # seconds
    .venv/bin/python -m benchmarks.single_host.run --stacks herring torch-gloo --workloads allreduce \\
        --np 4 --sizes 67108864 --out /tmp/b/benchmarks.md

The Horovod-with-PyTorch peer environment is built on first use (about 5 minutes, cached in
.cache/horovod-torch), and so is DeepSpeed's shm op (about a minute, .cache/deepspeed);
--no-peer-setup skips both and reports those stacks as unavailable unless they were built before."""

import argparse
import json
import os
import shlex
import subprocess
import sys
import time

from benchmarks.common import core_round_trip, deepspeed_env, machine, peer_env
from benchmarks.common.paths import DOCS_DIR, ROOT, WORKERS_DIR, results_dir_for, shown
from benchmarks.single_host import stacks
from benchmarks.single_host.plan import ALL_STACKS, PRESETS, make_plan
from benchmarks.single_host.report import write_report


def log(msg):
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def setup_peers(plan, allow):
    """Builds the Horovod-with-PyTorch environment and the DeepSpeed peer if the plan needs them;
    returns {stack: reason} for stacks that cannot run."""
    unavailable = {}
    # (stack, its setup script, what the log says it sets up, what failed)
    for stack, script, what, failure in (
            ("deepspeed-shm", deepspeed_env.SETUP_SCRIPT, "the DeepSpeed peer (cached; about a minute the first time)",
             "setting up the DeepSpeed peer failed"),
            ("horovod-gloo", peer_env.SETUP_SCRIPT,
             "the Horovod-with-PyTorch environment (cached; about 5 minutes the first time)",
             "building the Horovod-with-PyTorch environment failed")):
        if stack in plan.stacks and allow:
            log("setting up " + what)
            proc = subprocess.run(["bash", script], cwd=ROOT, capture_output=True, text=True)
            if proc.returncode != 0:
                unavailable[stack] = failure + ":\n" + "\n".join(proc.stderr.strip().splitlines()[-20:])
    for name in plan.stacks:
        ok, why = stacks.available(name)
        if not ok and name not in unavailable:
            unavailable[name] = why
    return unavailable


def measure_memory(plan):
    argv = [sys.executable, os.path.join(WORKERS_DIR, "membw_worker.py"),
            "--bytes", str(plan.membw["bytes"]), "--trials", str(plan.membw["trials"]),
            "--reps", str(plan.membw["reps"]), "--procs", "1", str(os.cpu_count() or 1)]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        if proc.returncode == 0:
            return json.loads(proc.stdout.strip().splitlines()[-1])
        return {"error": f"exit status {proc.returncode}: {proc.stderr.strip()[-2000:]}"}
    except (subprocess.TimeoutExpired, ValueError, IndexError) as e:
        return {"error": f"{type(e).__name__}: {e}"}


def run_launch(name, np, variant, specs, plan, log_file):
    """One launch, with the core-to-core round trip measured just before and just after it."""
    timeout = 90 + sum(w.get("timeout", 300) for w in specs)
    label = name + (f" ({variant})" if variant else "")
    log(f"{label} np={np}: {', '.join(w['id'] for w in specs)} (deadline {timeout} s)")
    before = core_round_trip.measure()
    res = stacks.launch(name, np, specs, variant=variant, timeout=timeout, log=log_file,
                        extra_env=plan.extra_env.get(name))
    res.core_round_trip_ns = [before, core_round_trip.measure()]
    log(f"  {'ok' if res.ok else 'FAILED'} in {res.seconds:.0f} s, {len(res.records)} records; core-to-core "
        f"round trip {res.core_round_trip_ns} ns before and after")
    return res


def run(plan, unavailable, log_file):
    """Every launch of the plan; a failed launch with several workloads is retried one workload at
    a time for those that produced nothing, so one failing workload costs only itself."""
    records, launches = [], []

    def keep(res, repeat):
        for r in res.records + res.errors:
            r["repeat"] = repeat
        records.extend(res.records)
        launches.append({"stack": res.stack, "variant": res.variant, "np": res.np, "workloads": res.workloads,
                         "ok": res.ok, "seconds": round(res.seconds, 1), "returncode": res.returncode,
                         "timed_out": res.timed_out, "errors": res.errors, "output_tail": res.output_tail,
                         "error_lines": res.error_lines, "repeat": repeat,
                         "core_round_trip_ns": res.core_round_trip_ns})

    for repeat, np, name, variant, specs in plan.launches(lambda s: stacks.STACKS[s].variants):
        if name in unavailable:
            launches.append({"stack": name, "variant": variant or "", "np": np, "workloads": [w["id"] for w in specs],
                             "ok": False, "seconds": 0, "returncode": None, "timed_out": False, "errors": [],
                             "output_tail": unavailable[name], "error_lines": [], "unavailable": True,
                             "repeat": repeat})
            continue
        res = run_launch(name, np, variant, specs, plan, log_file)
        done = {r["workload"] for r in res.records}
        errored = {e["workload"] for e in res.errors}
        # A launch that died before measuring anything failed as a stack (start-up): no retry.
        got_going = bool(res.records or res.errors)
        retry = [w for w in specs if w["id"] not in done and w["id"] not in errored] if not res.ok else []
        if not res.ok and got_going and len(specs) > 1 and retry:
            # Keep what the failed launch measured; the workloads it never reached run alone.
            res.workloads = [w["id"] for w in specs if w not in retry]
            keep(res, repeat)
            for w in retry:
                keep(run_launch(name, np, variant, [w], plan, log_file), repeat)
        else:
            keep(res, repeat)
    return records, launches


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.single_host.run",
                                description="Runs every stack on the same workloads and writes the report.",
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--preset", choices=sorted(PRESETS), default="full")
    p.add_argument("--stacks", nargs="+", choices=ALL_STACKS, help="default: the preset's")
    p.add_argument("--np", type=int, nargs="+", help="rank counts (default: the preset's)")
    p.add_argument("--workloads", nargs="+", help="workload ids of the preset (allreduce, gradset-resnet50, "
                   "gradset-bert-base, tiny, train)")
    p.add_argument("--sizes", type=int, nargs="+", help="allreduce sizes in bytes")
    p.add_argument("--tiny-count", type=int, help="tensors per step of the tiny workload")
    p.add_argument("--repeats", type=int, help="run every launch this many times (samples are pooled)")
    p.add_argument("--herring-env", nargs="+", default=[], metavar="KEY=VALUE",
                   help="extra environment for the herring stacks (e.g. a knob being tuned)")
    p.add_argument("--out", default=os.path.join(DOCS_DIR, "benchmarks.md"), help="the markdown report")
    p.add_argument("--img-dir", default=None, help="default: img/ beside --out")
    p.add_argument("--results", default=None, help="raw results JSON (default: single_host.json beside --out, "
                   "or in benchmarks/results/ when --out is in docs/)")
    p.add_argument("--cluster-results", default=None, help="JSON of the simulated-cluster harness to include")
    p.add_argument("--no-peer-setup", action="store_true",
                   help="do not build the Horovod-with-PyTorch environment or the DeepSpeed peer")
    args = p.parse_args(argv)

    herring_env = dict(kv.split("=", 1) for kv in args.herring_env)
    plan = make_plan(args.preset, stacks=args.stacks, nps=args.np, workloads=args.workloads, sizes=args.sizes,
                     repeats=args.repeats, tiny_count=args.tiny_count,
                     extra_env={"herring": herring_env, "herring-ring": herring_env} if herring_env else None)
    out = os.path.abspath(args.out)
    img_dir = os.path.abspath(args.img_dir or os.path.join(os.path.dirname(out), "img"))
    results_path = os.path.abspath(args.results or os.path.join(results_dir_for(out), "single_host.json"))
    os.makedirs(os.path.dirname(out), exist_ok=True)
    os.makedirs(os.path.dirname(results_path), exist_ok=True)
    given = sys.argv[1:] if argv is None else argv
    command = " ".join(["python -m benchmarks.single_host.run"] + [shlex.quote(a) for a in given])

    start = time.monotonic()
    load_start = machine.load_average()
    unavailable = setup_peers(plan, not args.no_peer_setup)
    for name, why in unavailable.items():
        log(f"{name} cannot run: {why.splitlines()[0]}")
    facts = machine.facts(with_peer="horovod-gloo" in plan.stacks and "horovod-gloo" not in unavailable)
    facts["load_average_start"] = load_start
    log("measuring memory bandwidth")
    membw = measure_memory(plan)
    # The whole output of failed launches, outside the tracked files (the report keeps a tail).
    log_path = os.path.join(os.path.dirname(peer_env.cache_dir()), "benchmarks", "failures.log")
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    with open(log_path, "w") as log_file:
        records, launches = run(plan, unavailable, log_file)
    if os.path.getsize(log_path) == 0:
        os.unlink(log_path)
    else:
        log(f"output of the failed launches: {log_path}")
    facts["load_average_end"] = machine.load_average()

    data = {
        "meta": {"preset": plan.preset, "command": command, "seconds": time.monotonic() - start,
                 "results_path": shown(results_path),
                 "failures_log": log_path if os.path.exists(log_path) else None},
        "plan": {"stacks": plan.stacks, "nps": plan.nps, "repeats": plan.repeats, "workloads": plan.workloads,
                 "membw": plan.membw, "extra_env": plan.extra_env},
        "machine": facts, "membw": membw, "records": records, "launches": launches,
    }
    with open(results_path, "w") as f:
        json.dump(data, f, indent=1)
    cluster = None
    if args.cluster_results:
        with open(args.cluster_results) as f:
            cluster = json.load(f)
    write_report(data, out, img_dir, cluster)
    failed = [l for l in launches if not l["ok"]]
    log(f"wrote {out} and {results_path} in {(time.monotonic() - start) / 60:.1f} min"
        + (f"; {len(failed)} launch(es) failed (see the report)" if failed else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
