"""What a launch of one stack starts from, for every script that compares stacks side by side
(benchmarks/single_host, reliability/compare_peers): the caller's environment without the stacks'
knobs, so each stack runs with its own defaults, and a free port for a launcher's rendezvous."""

import os
import socket


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrubbed_env(bin_dir, scrubbed_prefixes, kept=()):
    """os.environ without variables starting with `scrubbed_prefixes` (except those in `kept`) and
    without the Python and launcher variables of the caller's own job; bin_dir first on PATH,
    unbuffered output and one OpenMP thread a rank."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(scrubbed_prefixes) or k in kept}
    for k in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env.pop(k, None)
    env.update(PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""), PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    return env
