"""What a user sees when a peer dies or freezes mid-allreduce: herring, stock Horovod-gloo and
torch.distributed gloo, measured the same way, written to docs/reliability.md (section `peers`)
and benchmarks/results/reliability.json.

    .venv/bin/python -m reliability.compare_peers [--stacks herring horovod-gloo torch-gloo torch-gloo-30s]
                                                  [--scenarios kill kill-library stop] [--cap 150]

Each run: 4 ranks on this host (the stack's own launcher) run 4 MiB allreduces back to back
(reliability/peer_fault_worker.py); once every rank has done a few, rank 2 gets SIGKILL ("kill",
and "kill-library" where the ranks ignore the launcher's SIGTERM so that what their library
detects by itself shows) or SIGSTOP ("stop"). Recorded: when each survivor raised and what (seconds after the signal),
when the launcher exited and with what status, or that nothing happened within --cap seconds
(then the run is ended by the driver). Every stack runs with its defaults: herring
HERRING_TIMEOUT_SECONDS=30, Horovod HOROVOD_GLOO_TIMEOUT_SECONDS=30, torch's default process
group timeout (30 min); torch-gloo-30s passes timeout=30 s to init_process_group.

Stock Horovod comes from the environment benchmarks/peers/setup_horovod_torch.sh builds
(.cache/horovod-torch); run it first if that is missing.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from benchmarks.common.stack_env import free_port, scrubbed_env
from reliability import doc_sections

ROOT = doc_sections.ROOT
WORKER = os.path.join(ROOT, "reliability", "peer_fault_worker.py")
VENV_BIN = os.path.join(ROOT, ".venv", "bin")
NP, VICTIM = 4, 2
# After the survivors raised, how long the launcher gets to end the job before the run is cut.
LAUNCHER_GRACE = 20.0
STACKS = ["herring", "horovod-gloo", "torch-gloo", "torch-gloo-30s"]
# kill: SIGKILL, ranks with default signal handling (what a user sees, launcher included);
# kill-library: SIGKILL, ranks ignore SIGTERM, so the launcher cannot end them before their library
# raises (what the library itself detects); stop: SIGSTOP (launchers see nothing: no process ended).
SCENARIOS = ["kill", "kill-library", "stop"]
SIGNALS = {"kill": signal.SIGKILL, "kill-library": signal.SIGKILL, "stop": signal.SIGSTOP}


def peer_python():
    cache = os.environ.get("HERRING_BENCH_CACHE", os.path.join(ROOT, ".cache"))
    return os.path.join(cache, "horovod-torch", "venv", "bin", "python")


def base_env(bin_dir):
    """The caller's environment without any stack's knobs, so each stack runs with its defaults."""
    return scrubbed_env(bin_dir, ("HOROVOD_", "HERRING_", "OMPI_", "PMIX_", "MASTER_", "TORCHELASTIC_"))


def command(stack, results, ignore_sigterm=False):
    py = os.path.join(VENV_BIN, "python")
    worker = [WORKER, "--results", results] + (["--ignore-sigterm"] if ignore_sigterm else [])
    if stack == "herring":
        env = base_env(VENV_BIN)
        env["HOROVOD_BACKEND"] = "herring"
        return [os.path.join(VENV_BIN, "horovodrun"), "--gloo", "-np", str(NP), "-H", f"localhost:{NP}", py,
                *worker, "--api", "horovod"], env
    if stack == "horovod-gloo":
        peer = peer_python()
        if not os.access(peer, os.X_OK):
            raise SystemExit(f"{peer} is missing: run bash benchmarks/peers/setup_horovod_torch.sh first")
        peer_bin = os.path.dirname(peer)
        return [os.path.join(peer_bin, "horovodrun"), "--gloo", "-np", str(NP), "-H", f"localhost:{NP}", peer,
                *worker, "--api", "horovod"], base_env(peer_bin)
    timeout = ["--torch-timeout", "30"] if stack == "torch-gloo-30s" else []
    return [py, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", str(NP), "--master-addr",
            "127.0.0.1", "--master-port", str(free_port()), *worker, "--api", "torch", *timeout], base_env(VENV_BIN)


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def run_one(stack, scenario, cap):
    results = tempfile.mkdtemp(prefix="herring-peers-")
    argv, env = command(stack, results, ignore_sigterm=scenario == "kill-library")
    log = open(os.path.join(results, "launcher.log"), "w+")
    launcher = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    record = {"stack": stack, "scenario": scenario, "np": NP, "victim": VICTIM}
    pids = {}
    try:
        deadline = time.monotonic() + 180
        while len(pids) < NP:
            for r in range(NP):
                path = os.path.join(results, f"{r}.ready")
                if r not in pids and os.path.exists(path):
                    with open(path) as f:
                        pids[r] = json.load(f)["pid"]
            if launcher.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                raise RuntimeError(f"{stack}: the job did not start:\n{log.read()[-3000:]}")
            time.sleep(0.05)
        time.sleep(1.0)  # steady state: the victim is inside an allreduce when the signal lands
        signalled = time.monotonic()
        os.kill(pids[VICTIM], SIGNALS[scenario])
        survivors = [r for r in range(NP) if r != VICTIM]
        launcher_exit = settled = None
        while time.monotonic() - signalled < cap:
            if launcher_exit is None and launcher.poll() is not None:
                launcher_exit = time.monotonic() - signalled
            reported = [os.path.exists(os.path.join(results, f"{r}.json")) for r in survivors]
            gone = [not alive(pids[r]) for r in survivors]
            if all(a or b for a, b in zip(reported, gone)):
                # Everyone who will raise has raised; give the launcher a moment to notice.
                settled = settled or time.monotonic()
                if launcher_exit is not None or time.monotonic() - settled > LAUNCHER_GRACE:
                    break
            time.sleep(0.05)
        waited = time.monotonic() - signalled
        if launcher_exit is None and launcher.poll() is not None:
            launcher_exit = waited
        per_rank = []
        for r in survivors:
            path = os.path.join(results, f"{r}.json")
            if os.path.exists(path):
                with open(path) as f:
                    o = json.load(f)
                per_rank.append({"rank": r, "error": o["error"], "seconds": round(o["error_at"] - signalled, 3)})
            else:
                per_rank.append({"rank": r, "error": None, "seconds": None,
                                 "ended_without_error": not alive(pids[r])})
        record.update(survivors=per_rank, observed_seconds=round(waited, 1), cap=cap,
                      launcher_exit_seconds=round(launcher_exit, 3) if launcher_exit is not None else None,
                      launcher_status=launcher.returncode)
    finally:
        for pid in pids.values():
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
        launcher.wait()
        log.seek(0)
        record["launcher_tail"] = log.read()[-4000:]
        log.close()
        subprocess.run(["rm", "-rf", results])
    return record


def summary_row(r):
    errors = [s for s in r["survivors"] if s["error"]]
    if errors:
        times = sorted(s["seconds"] for s in errors)
        raise_text = f"{times[0]:.2f} s" if len(times) == 1 or times[-1] - times[0] < 0.005 else \
            f"{times[0]:.2f}-{times[-1]:.2f} s"
        raise_text += f" ({len(errors)} of {len(r['survivors'])})"
        message = " / ".join(dict.fromkeys(s["error"] for s in errors))
    elif any(s.get("ended_without_error") for s in r["survivors"]):
        raise_text = "none: ended by the launcher first"
        message = "(terminated by the launcher's SIGTERM before raising)"
    else:
        raise_text = f"no error within {r['cap']:.0f} s"
        message = "(nothing: the survivors keep waiting)"
    if r["launcher_exit_seconds"] is not None:
        launcher = f"{r['launcher_exit_seconds']:.2f} s, status {r['launcher_status']}"
    else:
        launcher = f"still running at {r['observed_seconds']:.0f} s (ended by the driver)"
    return raise_text, launcher, message


def render(records):
    lines = ["| Stack | Peer | Survivors raise after | Launcher exits after | What the survivors raise |",
             "| --- | --- | --- | --- | --- |"]
    what = {"kill": "SIGKILL", "kill-library": "SIGKILL, ranks ignore SIGTERM", "stop": "SIGSTOP"}
    for r in records:
        raise_text, launcher, message = summary_row(r)
        lines.append(f"| {r['stack']} | {what[r['scenario']]} | {raise_text} | {launcher} | "
                     f"{doc_sections.cell(message, 400)} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stacks", nargs="+", default=STACKS, choices=STACKS)
    parser.add_argument("--scenarios", nargs="+", default=SCENARIOS, choices=SCENARIOS)
    parser.add_argument("--cap", type=float, default=150.0, help="seconds to wait after the signal")
    parser.add_argument("--no-doc", action="store_true", help="print only; leave docs/ alone")
    parser.add_argument("--render-only", action="store_true",
                        help="rewrite the table from benchmarks/results/reliability.json")
    args = parser.parse_args()
    # Runs of other stacks or scenarios measured earlier stay; the ones measured now replace theirs.
    records = [] if args.no_doc else doc_sections.load_figures().get("peers", {}).get("runs", [])
    if not args.render_only:
        for scenario in args.scenarios:
            for stack in args.stacks:
                print(f"[peers] {stack}: {scenario} rank {VICTIM} ...", file=sys.stderr, flush=True)
                r = run_one(stack, scenario, args.cap)
                print(f"[peers]   {summary_row(r)}", file=sys.stderr, flush=True)
                records = [x for x in records if (x["stack"], x["scenario"]) != (stack, scenario)] + [r]
    order = {(sc, st): i for i, (sc, st) in enumerate((sc, st) for sc in SCENARIOS for st in STACKS)}
    records.sort(key=lambda x: order[(x["scenario"], x["stack"])])
    print(render(records))
    if not args.no_doc:
        doc_sections.save_figures("peers", {"date": time.strftime("%Y-%m-%d"), "runs": records})
        doc_sections.replace_section("peers", render(records))


if __name__ == "__main__":
    main()
