"""The rendezvous store of a scale launch: Horovod's own RendezvousServer (the HTTP key-value
store horovodrun runs for gloo jobs), initialised with the same host allocation plan horovodrun
would compute for `-H HOSTS -np NP`, so Horovod-gloo ranks (which count finished ranks per scope)
and herring ranks (which use a scope of their own) both rendezvous exactly as under horovodrun.

Runs inside host 0 of the simulated cluster; prints `PORT <n>` once listening, then serves until
its standard input closes (the harness holds it open for the job's life).

    python -m benchmarks.scale.store simhost0:16,simhost1:16 32"""

import sys

from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts
from horovod.runner.http.http_server import RendezvousServer


def main():
    hosts, np = sys.argv[1], int(sys.argv[2])
    server = RendezvousServer(verbose=0)
    port = server.start()
    server.init(get_host_assignments(parse_hosts(hosts), np))
    print(f"PORT {port}", flush=True)
    sys.stdin.read()            # until the harness closes our stdin (or kills us)
    server.stop()


if __name__ == "__main__":
    main()
