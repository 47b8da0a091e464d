"""Per-request cost of the rendezvous store (Horovod's RendezvousServer, benchmarks/scale/store.py),
measured from another host: sequential PUTs and GETs over fresh HTTP connections, as the engine's
rendezvous makes them (native/rendezvous/http_store.cc opens one per request). Prints JSON:
{"put": median seconds, "get": median seconds, "requests": n}. The model (model.py) uses the GET
cost for the rendezvous, where every rank reads every record.

    python -m benchmarks.scale.store_probe ADDR PORT REQUESTS"""

import http.client
import json
import statistics
import sys
import time


def request(addr, port, method, path, body=None):
    conn = http.client.HTTPConnection(addr, port, timeout=30)
    try:
        conn.request(method, path, body=body)
        conn.getresponse().read()
    finally:
        conn.close()


def main():
    addr, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    timings = {"put": [], "get": []}
    for i in range(n):
        t0 = time.perf_counter()
        request(addr, port, "PUT", f"/probe/k{i}", b"x" * 200)
        t1 = time.perf_counter()
        request(addr, port, "GET", f"/probe/k{i}")
        t2 = time.perf_counter()
        timings["put"].append(t1 - t0)
        timings["get"].append(t2 - t1)
    print(json.dumps({"put": statistics.median(timings["put"]), "get": statistics.median(timings["get"]),
                      "requests": n}))


if __name__ == "__main__":
    main()
