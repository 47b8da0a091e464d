"""The EFLOPS benchmark (issue 6): ring vs halving-doubling vs topology-aware halving-doubling vs
the herring parameter-server allreduce, in a simulated two-group cluster whose traffic inside a
group shares one constrained link while every pair of hosts across the groups has a direct link
(BiGraph). Every stack runs the same allreduce sizes in the same cluster, launched by the real
horovodrun over ssh; the results are checked on every rank (benchmarks/workers/bench_worker.py).

    .venv/bin/python -m benchmarks.eflops.run     # benchmarks/results/eflops.json, docs/img/eflops_allreduce.png
                                                  # and the results section of docs/eflops.md
    .venv/bin/python -m benchmarks.eflops.run --nps 4 --sizes 1048576 --out /tmp/e/eflops.json --no-doc
    .venv/bin/python -m benchmarks.eflops.run --report benchmarks/results/eflops.json   # plot + section only

Beside the measured medians it reports what a bottleneck model of the same links predicts for
each algorithm (link_model.py: each step of an algorithm is a set of concurrent flows; a step lasts
as long as its most loaded link needs; the model of native/ops/topology_map.h, extended to the ring
and to the PS's all-to-all), with the hd-topo positions the engine itself logged, so a gap between
the paper, the model and the measurement can be read off the table (report.py)."""

import argparse
import json
import os
import re
import shlex
import sys
import tempfile
import time

from benchmarks.common.formatting import fmt_bytes
from benchmarks.common.paths import DOCS_DIR, IMG_DIR, RESULTS_DIR, ROOT, WORKERS_DIR, shown
from benchmarks.common.worker_records import read_records
from benchmarks.eflops.report import plot, section, write_doc

WORKER = os.path.join(WORKERS_DIR, "bench_worker.py")
DOC = os.path.join(DOCS_DIR, "eflops.md")
MiB = 1 << 20

# The stacks, all on the herring engine (HOROVOD_BACKEND=herring), in the order of the tables.
STACKS = [
    ("ring", {"HERRING_ALLREDUCE": "ring"}, "TCP ring reduce-scatter + all-gather, ranks in rank order"),
    ("hd", {"HERRING_ALLREDUCE": "hd"}, "halving-doubling, positions in rank order"),
    ("herring", {"HERRING_ALLREDUCE": "herring"}, "parameter-server allreduce, one shard per rank (colocated)"),
    ("hd-topo", {"HERRING_ALLREDUCE": "hd-topo"}, "halving-doubling with the BiGraph mapping (HERRING_TOPOLOGY)"),
]


def log(msg):
    print(f"[eflops {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --- the scenario --------------------------------------------------------------------------------

def cluster_dict(np, direct_rate, shared_rate):
    """np hosts with one rank each; the first half in group a, the rest in b. Each host's own link
    runs at the direct rate, so the shared intra-group link is the only constraint inside a group."""
    half = (np + 1) // 2
    return {"rate": direct_rate,
            "hosts": [{"slots": 1, "group": "a" if i < half else "b"} for i in range(np)],
            "intra": {"link": "shared", "rate": shared_rate},
            "cross": {"link": "direct", "rate": direct_rate}}


MAPPING = re.compile(r"hd-topo, process set 0: (.*?) of (\d+) members \(.*?\): position->member\[host/group\] "
                     r"(.*?); most flows on one link per step: ([\d ]+);")


def parse_mapping(output):
    """The global set's mapping as the engine logged it: (description, [rank per position], flows)."""
    m = MAPPING.search(output)
    if not m:
        return None
    order = [int(x.split("->")[1].split("[")[0]) for x in m.group(3).split(", ")]
    return {"strategy": m.group(1), "order": order, "positions": m.group(3),
            "most_flows_per_step": [int(x) for x in m.group(4).split()]}


# --- running -------------------------------------------------------------------------------------

def job_env(extra):
    """The caller's HOROVOD_*/HERRING_* variables must not leak into a stack's launch."""
    env = {k: None for k in os.environ if k.startswith(("HOROVOD_", "HERRING_")) and k != "HERRING_BENCH_CACHE"}
    env.update({"HOROVOD_BACKEND": "herring", "OMP_NUM_THREADS": "1"}, **extra)
    return env


def run_stack(cluster, stack, extra, sizes, timing, workdir, timeout):
    plan, out = os.path.join(workdir, f"plan-{stack}.json"), os.path.join(workdir, f"out-{stack}.jsonl")
    with open(plan, "w") as f:
        json.dump({"workloads": [{"id": "allreduce", "kind": "allreduce", "sizes": sizes, "timing": timing}]}, f)
    if os.path.exists(out):
        os.unlink(out)
    argv = [sys.executable, WORKER, "--api", "horovod", "--plan", plan, "--out", out]
    run = cluster.horovodrun(argv, env=job_env(extra), cwd=ROOT, timeout=timeout)
    records, errors = read_records(out)
    return run, records, errors


def measure(nps, sizes, direct_rate, shared_rate, timing, stacks, timeout):
    from tools.simcluster.cluster import SimulatedCluster
    from tools.simcluster.cluster_spec import ClusterSpec
    from tools.simcluster.link_bound import measure_link
    results = {"scenario": {"direct_rate": direct_rate, "shared_rate": shared_rate, "sizes": sizes,
                            "timing": timing, "stacks": [s for s, _, _ in STACKS if s in stacks],
                            "descriptions": {s: d for s, _, d in STACKS}},
               "runs": []}
    for np in nps:
        spec = ClusterSpec.from_dict(cluster_dict(np, direct_rate, shared_rate))
        with tempfile.TemporaryDirectory(prefix="herring-eflops-") as workdir, SimulatedCluster(spec=spec) as c:
            topo = os.path.join(workdir, "cluster.json")
            with open(topo, "w") as f:
                json.dump(spec.to_dict(), f)
            entry = {"np": np, "cluster": spec.to_dict(), "describe": c.plan.describe(), "stacks": {}}
            half = (np + 1) // 2
            log(f"np={np}: {c.plan.describe()}; measuring the links with iperf3")
            cross = measure_link(c, 0, half)
            intra = measure_link(c, 1, 0)
            entry["links"] = {"cross_direct_bps": cross.sent_bps, "intra_shared_bps": intra.sent_bps,
                              "cross": cross.describe(), "intra": intra.describe()}
            for stack, extra, _ in STACKS:
                if stack not in stacks:
                    continue
                env = dict(extra)
                if stack == "hd-topo":
                    env.update(HERRING_TOPOLOGY=topo, HOROVOD_LOG_LEVEL="INFO")
                log(f"np={np} {stack}: sizes {', '.join(str(s) for s in sizes)}")
                started = time.monotonic()
                run, records, errors = run_stack(c, stack, env, sizes, timing, workdir, timeout)
                res = {"ok": run.returncode == 0 and not errors, "seconds": round(time.monotonic() - started, 1),
                       "records": [{k: r[k] for k in ("bytes", "times", "median", "p25", "p75")} for r in records],
                       "errors": [e.get("error") for e in errors]}
                if not res["ok"]:
                    res["output_tail"] = run.output[-3000:]
                    log(f"  FAILED (exit {run.returncode}): {(res['errors'] or [run.output[-300:]])[0]}")
                if stack == "hd-topo":
                    res["mapping"] = parse_mapping(run.output)
                entry["stacks"][stack] = res
                log(f"  {'ok' if res['ok'] else 'failed'} in {res['seconds']} s: " +
                    ", ".join(f"{fmt_bytes(r['bytes'])} {r['median']:.3f} s" for r in res["records"]))
            results["runs"].append(entry)
    return results


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.eflops.run", description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--nps", type=int, nargs="+", default=[4, 8], help="ranks (= hosts), default 4 8")
    p.add_argument("--sizes", type=int, nargs="+", default=[4 * MiB, 16 * MiB, 64 * MiB])
    p.add_argument("--direct-rate", default="200mbit", help="each cross-group pair's direct link (and host links)")
    p.add_argument("--shared-rate", default="100mbit", help="each group's shared internal link")
    p.add_argument("--stacks", nargs="+", default=[s for s, _, _ in STACKS], choices=[s for s, _, _ in STACKS])
    p.add_argument("--iters", type=int, nargs=2, default=[3, 5], metavar=("MIN", "MAX"))
    p.add_argument("--budget", type=float, default=8.0, help="seconds of timed iterations per size")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per launch")
    p.add_argument("--out", default=os.path.join(RESULTS_DIR, "eflops.json"))
    p.add_argument("--img", default=os.path.join(IMG_DIR, "eflops_allreduce.png"))
    p.add_argument("--doc", default=DOC, help="markdown file with the results markers")
    p.add_argument("--no-doc", action="store_true", help="do not write the section into --doc")
    p.add_argument("--report", metavar="RESULTS", help="only regenerate the plot and section from saved results")
    args = p.parse_args(argv)
    if args.report:
        with open(args.report) as f:
            results = json.load(f)
        results["results_path"] = shown(args.report)   # where it is now, wherever it was written
    else:
        timing = {"warmup": 1, "min_iters": args.iters[0], "max_iters": args.iters[1], "budget": args.budget}
        given = sys.argv[1:] if argv is None else argv
        load_at_start = " ".join(f"{x:.1f}" for x in os.getloadavg())
        results = measure(args.nps, args.sizes, args.direct_rate, args.shared_rate, timing, args.stacks,
                          args.timeout)
        results.update(command=" ".join(["python -m benchmarks.eflops.run"] + [shlex.quote(a) for a in given]),
                       date=time.strftime("%Y-%m-%d %H:%M"),
                       load_average=load_at_start)
        results["results_path"] = shown(args.out)
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
        log(f"wrote {args.out}")
    plot(results, args.img)
    log(f"wrote {args.img}")
    if not args.no_doc:
        write_doc(args.doc, section(results, os.path.dirname(os.path.abspath(args.doc)), args.img,
                                    results.get("command", "python -m benchmarks.eflops.run")))
        log(f"wrote the results section of {args.doc}")
    return 0 if all(s["ok"] for r in results["runs"] for s in r["stacks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
