"""The TCP round trip between two simulated hosts, measured: a ping-pong of small messages over
one TCP connection (TCP_NODELAY on both ends, blocking sockets, as a program that waits for its
answer would do), run inside the hosts' namespaces over the same shaped links a job uses, so the
latency benchmark can put an allreduce next to the round trip measured in the same run.

No ping-pong tool is installed here (netperf, sockperf, qperf are not): this is a short Python
echo. Each timed round trip is client send -> server recv + send -> client recv, perf_counter_ns
around it; a few hundred warm-up round trips first.

    python benchmarks/cluster/rtt.py server --bind ADDR --port P
    python benchmarks/cluster/rtt.py client --host ADDR --port P --sizes 1 4096 --iters 2000   # JSON

From the harness: measure_rtt(cluster, src, dst) runs the server in host `dst` and the client in
host `src` and returns, per message size, the round trips' median and quantiles (seconds)."""

import argparse
import json
import os
import socket
import statistics
import struct
import subprocess
import sys
import time

PORT = 5301


def _recv_exact(sock, n, buf):
    view = memoryview(buf)[:n]
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise ConnectionError("peer closed the connection")
        got += k


def serve(bind, port):
    """Echoes messages until the client closes: each message is a 4-byte length, then the bytes;
    the answer is the same bytes (no header)."""
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((bind, port))
    ls.listen(1)
    conn, _ = ls.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    head = bytearray(4)
    buf = bytearray(1 << 20)
    try:
        while True:
            try:
                _recv_exact(conn, 4, head)
            except ConnectionError:
                return
            (n,) = struct.unpack("!I", head)
            _recv_exact(conn, n, buf)
            conn.sendall(memoryview(buf)[:n])
    finally:
        conn.close()
        ls.close()


def _quantile(sorted_xs, q):
    i = min(len(sorted_xs) - 1, max(0, int(round(q * (len(sorted_xs) - 1)))))
    return sorted_xs[i]


def ping(host, port, sizes, iters, warmup, connect_timeout=10.0):
    deadline = time.monotonic() + connect_timeout
    while True:
        try:
            s = socket.create_connection((host, port), timeout=connect_timeout)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)
    s.settimeout(None)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    out = []
    try:
        for n in sizes:
            msg = struct.pack("!I", n) + bytes(n)
            buf = bytearray(max(n, 1))
            times = []
            for i in range(warmup + iters):
                t0 = time.perf_counter_ns()
                s.sendall(msg)
                _recv_exact(s, n, buf)
                t1 = time.perf_counter_ns()
                if i >= warmup:
                    times.append((t1 - t0) * 1e-9)
            xs = sorted(times)
            out.append({"bytes": n, "iters": iters, "median": statistics.median(xs), "min": xs[0],
                        "p10": _quantile(xs, 0.10), "p25": _quantile(xs, 0.25), "p75": _quantile(xs, 0.75),
                        "p90": _quantile(xs, 0.90), "p99": _quantile(xs, 0.99), "max": xs[-1]})
    finally:
        s.close()
    return out


def measure_rtt(cluster, src, dst, sizes=(1, 4096), iters=2000, warmup=200, timeout=60, port=PORT):
    """Ping-pong from host `src` to host `dst` (indices or names) inside the simulated cluster:
    {"src", "dst", "tool", "sizes": [{"bytes", "median", "p25", ...}]}; ClusterError on failure."""
    from tools.simcluster.processes import ClusterError, kill_group
    s, d = cluster._index(src), cluster._index(dst)
    here = os.path.abspath(__file__)
    server = cluster.popen(d, [sys.executable, here, "server", "--bind", cluster.address(d), "--port", str(port)],
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    started = time.monotonic()
    try:
        while not cluster.listening(d, port):
            if server.poll() is not None:
                raise ClusterError(f"ping-pong server on {cluster._name(d)} exited ({server.returncode}): "
                                   f"{server.stdout.read()[-2000:]}")
            if time.monotonic() - started > 10:
                raise ClusterError(f"ping-pong server on {cluster._name(d)} did not listen on port {port} in time")
            time.sleep(0.01)
        run = cluster.run(s, [sys.executable, here, "client", "--host", cluster.address(d), "--port", str(port),
                              "--iters", str(iters), "--warmup", str(warmup), "--sizes", *map(str, sizes)],
                          timeout=timeout)
        if run.returncode != 0:
            raise ClusterError(f"ping-pong {cluster._name(s)} -> {cluster._name(d)} failed ({run.returncode}):\n"
                               f"{run.output[-3000:]}")
        result = json.loads(run.output.strip().splitlines()[-1])
    finally:
        kill_group(server)
        if server in cluster._commands:
            cluster._commands.remove(server)
    return {"src": cluster._name(s), "dst": cluster._name(d), "seconds": round(time.monotonic() - started, 2),
            "tool": "python TCP ping-pong (benchmarks/cluster/rtt.py; TCP_NODELAY, blocking sockets)",
            "sizes": result}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="role", required=True)
    sv = sub.add_parser("server")
    sv.add_argument("--bind", default="0.0.0.0")
    sv.add_argument("--port", type=int, default=PORT)
    cl = sub.add_parser("client")
    cl.add_argument("--host", required=True)
    cl.add_argument("--port", type=int, default=PORT)
    cl.add_argument("--sizes", type=int, nargs="+", default=[1])
    cl.add_argument("--iters", type=int, default=2000)
    cl.add_argument("--warmup", type=int, default=200)
    args = p.parse_args(argv)
    if args.role == "server":
        serve(args.bind, args.port)
    else:
        print(json.dumps(ping(args.host, args.port, args.sizes, args.iters, args.warmup)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
