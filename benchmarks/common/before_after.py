"""Two builds measured in the same run: launches alternate between the checkouts (each with its
own .venv), so that the machine's drift hits both alike (benchmarks/single_host/*_before_after.py)."""

import argparse
import os
import socket
import subprocess

from benchmarks.common.paths import ROOT


def parser(doc):
    """The command line's parser, with the earlier checkout as its first argument."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("before", help="checkout of the earlier commit, with its .venv set up")
    return p


def runs_per_case(before, cases, launches, launch):
    """Yields (case, alternating(...) of launch(checkout, case)) for each case, in order."""
    checkouts = builds(before)
    for case in cases:
        yield case, alternating(checkouts, launches, lambda checkout: launch(checkout, case))


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
