"""Runs a worker script as if this rank were on simulated host rank // ranks_per_host, by setting
HERRING_HOSTNAME before the script starts: ranks with different names use TCP and the parameter
servers between them instead of shared memory. Usage: as_simulated_host.py RANKS_PER_HOST SCRIPT..."""

import os
import runpy
import sys

ranks_per_host = int(sys.argv[1])
rank = int(os.environ.get("HOROVOD_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))
os.environ["HERRING_HOSTNAME"] = f"simhost{rank // ranks_per_host}"
sys.argv = sys.argv[2:]
sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))  # as when the script runs itself
runpy.run_path(sys.argv[0], run_name="__main__")
