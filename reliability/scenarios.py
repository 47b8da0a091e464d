"""Runs the fault, stall, verify and stranger scenarios of the test suite once each, and writes what
the user saw (the exact messages) and how long it took into docs/reliability.md (sections
`faults`, `stall_verify`, `strangers`) and benchmarks/results/reliability.json.

    .venv/bin/python -m reliability.scenarios [--only faults stall_verify strangers]

It launches the same workers, with the same settings, as tests/reliability/test_reliability.py and
tests/native/test_security.py (it imports their launch helpers): 4 ranks on 2 simulated hosts with
HERRING_TIMEOUT_SECONDS=5 for the faults; the tests assert, this records. About 4 minutes.
"""

import argparse
import json
import os
import sys
import time

from reliability import doc_sections

sys.path[:0] = [os.path.join(doc_sections.ROOT, "tests", folder) for folder in ("harness", "reliability", "native")]

import launch  # noqa: E402
from test_reliability import FAULTS, WORKERS, herring_segments, run_fault  # noqa: E402
from test_security import run_strangers  # noqa: E402

ACTIONS = {"kill": "SIGKILL", "stop": "SIGSTOP", "exit": "exit(1)", "reset": "connections reset (RST)",
           "corrupt": "result corrupted"}
PHASES = {"negotiate": "negotiation", "gather": "coordinator gather", "shm": "shared-memory stage",
          "push": "push to server shards", "serve": "server shard", "pull": "pull from server shards",
          "scatter": "shared-memory all-gather"}


def faults():
    rows = []
    for spec, victim, _ in FAULTS:
        before = herring_segments()
        run, outcomes = run_fault(spec)
        action, phase, _, occurrence = spec.split(":")
        survivors = [{"rank": r, "error": o.get("error"), "seconds": round(o.get("seconds_to_error") or -1, 3)}
                     for r, o in sorted(outcomes.items()) if r != victim]
        rows.append({"spec": spec, "action": action, "phase": phase, "victim": victim, "survivors": survivors,
                     "launcher_status": run.returncode, "launcher_seconds": round(run.seconds, 1),
                     "shm_left": sorted(herring_segments() - before)})
        print(f"[scenarios] {spec}: {[s['seconds'] for s in survivors]}", file=sys.stderr, flush=True)
    return rows


def render_faults(rows):
    lines = ["| Injected (`HERRING_FAULT`) | What happens to the victim | Phase | Survivors that raised | "
             "Time to error (survivors) | horovodrun (whole run, start-up included) | Left in /dev/shm |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        raised = [s for s in r["survivors"] if s["error"]]
        times = sorted(s["seconds"] for s in raised)
        span = f"{times[0]:.2f}-{times[-1]:.2f} s" if times else "-"
        lines.append(f"| `{r['spec']}` | {ACTIONS[r['action']]} | {PHASES[r['phase']]} | {len(raised)} of 3 | {span} | "
                     f"exit {r['launcher_status']} after {r['launcher_seconds']:.0f} s | {len(r['shm_left']) or 'nothing'} |")
    lines += ["", "What the survivors raised (first survivor of each run; every survivor's message is in "
              "benchmarks/results/reliability.json):", ""]
    for r in rows:
        first = next((s for s in r["survivors"] if s["error"]), None)
        if first:
            lines.append(f"- `{r['spec']}`, rank {first['rank']}: `{doc_sections.cell(first['error'], 600)}`")
    return "\n".join(lines)


def stall_and_verify():
    results = launch.scratch_dir("herring-stall-")
    run = launch.horovodrun(3, [os.path.join(WORKERS, "stall_worker.py")], timeout=120, HERRING_TEST_RESULTS=results,
                            HOROVOD_STALL_CHECK_TIME_SECONDS=2, HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=6)
    warnings = [line for line in run.output.splitlines() if "Missing ranks" in line and "WARNING" in line]
    stall = {"launcher_status": run.returncode, "warning": warnings[-1] if warnings else None, "ranks": {}}
    for r in range(3):
        with open(os.path.join(results, f"{r}.json")) as f:
            o = json.load(f)
        stall["ranks"][r] = {"error": o["error"], "seconds": round(o["seconds"], 2)}
    run_v, outcomes = run_fault("corrupt:scatter:1:3", np=3, hosts=1, HERRING_VERIFY=1)
    verify = {"launcher_status": run_v.returncode,
              "ranks": {r: {"error": o["error"]} for r, o in sorted(outcomes.items())}}
    return {"stall": stall, "verify": verify}


def render_stall_verify(f):
    s, v = f["stall"], f["verify"]
    times = sorted(x["seconds"] for x in s["ranks"].values())
    return "\n".join([
        "Stall: 3 ranks, `HOROVOD_STALL_CHECK_TIME_SECONDS=2`, `HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=6`; rank 2 "
        "skips `grad.1` and submits `only.rank2`, which nobody else does "
        f"(tests/reliability/workers/stall_worker.py). Every rank raised after {times[0]:.1f}"
        f"{'' if times[-1] - times[0] < 0.05 else f'-{times[-1]:.1f}'} s; "
        f"horovodrun exited with status {s['launcher_status']}.",
        "",
        f"- Warning on rank 0: `{doc_sections.cell(s['warning'], 700)}`",
        f"- Error on rank 0: `{doc_sections.cell(s['ranks'][0]['error'], 700)}`",
        "",
        "Verify: 3 ranks, `HERRING_VERIFY=1`, `HERRING_FAULT=corrupt:scatter:1:3` flips bits of rank 1's result "
        f"at its third all-gather; horovodrun exited with status {v['launcher_status']}.",
        "",
        *[f"- Rank {r}: `{doc_sections.cell(o['error'], 500)}`" for r, o in v["ranks"].items()],
    ])


def strangers():
    returncode, output, report, outcomes = run_strangers(3)
    return {"job_status": returncode, "report": report,
            "steps": {r: o["steps"] for r, o in outcomes.items()},
            "wrong": sum(len(o["wrong"]) for o in outcomes.values()),
            "errors": [o["error"] for o in outcomes.values() if o["error"]]}


def render_strangers(f):
    rep = f["report"]
    cases = {}
    for target in rep["targets"].values():
        for name, o in target.items():
            cases.setdefault(name, []).append(o)  # one aggregate per target
    yes = {True: "yes", False: "no"}
    during = rep["finished_at"] - rep["started_at"]
    lines = [f"A 3-rank job on 2 simulated hosts; listeners: {', '.join(rep['listeners'])} (loopback only). "
             f"The stranger read the job token from horovodrun's rendezvous store: {yes[rep['learned_token']]}; "
             f"the secret too: {yes[rep['learned_secret']]}. The strangers knocked for {during:.1f} s "
             f"({rep['rounds']} rounds); the job ran "
             f"{min(f['steps'].values())} steps in all, with {f['wrong']} wrong results, and exited with status "
             f"{f['job_status']}.",
             "", "| Stranger sends | Connections (all ranks) | Closed by the rank | How | Slowest close | Bytes answered |",
             "| --- | --- | --- | --- | --- | --- |"]
    for name, outs in cases.items():
        n = sum(o["connections"] for o in outs)
        hows = sorted({h for o in outs for h in o["how"]})
        closed = all(o["closed_by_rank"] for o in outs)
        lines.append(f"| {name.replace('_', ' ')} | {n} | {'all' if closed else 'NOT ALL'} | {', '.join(hows)} | "
                     f"{max(o['ms'] for o in outs):.1f} ms | {sum(o['bytes_received'] for o in outs)} |")
    return "\n".join(lines)


SECTIONS = {"faults": (faults, render_faults), "stall_verify": (stall_and_verify, render_stall_verify),
            "strangers": (strangers, render_strangers)}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", choices=list(SECTIONS), default=list(SECTIONS))
    args = parser.parse_args()
    for name in args.only:
        measure, render = SECTIONS[name]
        start = time.monotonic()
        figures = measure()
        figures = {"date": time.strftime("%Y-%m-%d"), "seconds": round(time.monotonic() - start, 1), "runs": figures}
        doc_sections.save_figures(name, figures)
        doc_sections.replace_section(name, render(figures["runs"]))
        print(f"[scenarios] {name} written ({figures['seconds']:.0f} s)", file=sys.stderr)


if __name__ == "__main__":
    main()
