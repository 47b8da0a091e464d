"""Runs a worker script after recording where this rank runs: the host name it sees, the host name
horovodrun gave it, its network namespace, whether it was started over ssh, its interpreter and
backend. Written to $HERRING_TEST_RESULTS/host-<rank>.json. Usage: record_host.py SCRIPT [ARGS...]"""

import json
import os
import runpy
import socket
import sys

rank = int(os.environ["HOROVOD_RANK"])
record = {
    "gethostname": socket.gethostname(),
    "horovod_hostname": os.environ.get("HOROVOD_HOSTNAME"),
    "netns_inode": os.stat("/proc/self/ns/net").st_ino,
    "ssh_connection": os.environ.get("SSH_CONNECTION"),   # "client port server port" if started by sshd
    "python": sys.executable,
    "backend": os.environ.get("HOROVOD_BACKEND"),
    "gloo_iface": os.environ.get("HOROVOD_GLOO_IFACE"),
}
with open(os.path.join(os.environ["HERRING_TEST_RESULTS"], f"host-{rank}.json"), "w") as f:
    json.dump(record, f)
sys.argv = sys.argv[1:]
sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))  # as when the script runs itself
runpy.run_path(sys.argv[0], run_name="__main__")
