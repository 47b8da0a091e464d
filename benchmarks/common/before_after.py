"""Two builds measured in the same run: launches alternate between the checkouts (each with its
own .venv), so that the machine's drift hits both alike (benchmarks/single_host/*_before_after.py)."""

import argparse
import os
import socket
import subprocess

from benchmarks.common.machine import load_average
from benchmarks.common.paths import ROOT


def parser(doc, launches):
    """The command line's parser: the earlier checkout, then --launches (per build and case)."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("before", help="checkout of the earlier commit, with its .venv set up")
    p.add_argument("--launches", type=int, default=launches)
    return p


def measure(args, cases, launch):
    """([(case, alternating(...) of launch(checkout, case))] for each case in order, and the load
    average at the start and after each case)."""
    checkouts = builds(args.before)
    results, loads = [], [load_average()]
    for case in cases:
        results.append((case, alternating(checkouts, args.launches, lambda checkout: launch(checkout, case))))
        loads.append(load_average())
    return results, loads


def builds(before):
    """{"before": the earlier checkout, "after": this one}."""
    return {"before": os.path.abspath(before), "after": ROOT}


def alternating(checkouts, launches, launch):
    """{name: [launch(checkout) for each of `launches` rounds]}, the builds taking turns."""
    runs = {name: [] for name in checkouts}
    for _ in range(launches):
        for name, checkout in checkouts.items():
            runs[name].append(launch(checkout))
    return runs


def torchrun(checkout, np_, worker, args, env=None, timeout=1800):
    """torchrun of `checkout`'s .venv with `worker` (a path) on one host; its stdout."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [os.path.join(checkout, ".venv", "bin", "torchrun"), "--nproc-per-node", str(np_), "--master-port",
           str(port), worker, *args]
    return subprocess.run(cmd, cwd=checkout, timeout=timeout, capture_output=True, text=True, check=True,
                          env=env).stdout
