"""The worker's side of horovodrun's elastic rendezvous (hvd_herring/elastic_rendezvous.py)
against a stand-in for the driver's HTTP store, in one process: the new place from
rank_and_size, Horovod's message for a removed worker, the per-round record exchange and its
deadline. The real driver is exercised by tests/elastic/test_elastic_workers.py."""

import http.server
import threading
import time

import pytest

from hvd_herring import elastic_rendezvous as er


class FakeDriverStore:
    """PUT/GET /<scope>/<key> like horovodrun's store; rank_and_size answers from `places`."""

    def __init__(self, places):
        self.data = {}
        self.places = places
        self.get_delay = 0.0  # seconds each GET takes: a store slow to answer
        store = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                time.sleep(store.get_delay)
                _, scope, key = self.path.split("/")
                if scope == er.RANK_AND_SIZE_SCOPE:
                    value = store.places[key].encode()
                else:
                    value = store.data.get((scope, key))
                if value is None:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(value)))
                self.end_headers()
                self.wfile.write(value)

            def do_PUT(self):
                _, scope, key = self.path.split("/")
                store.data[(scope, key)] = self.rfile.read(int(self.headers["Content-Length"]))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.client = er.DriverStore("127.0.0.1", self.server.server_address[1])

    def close(self):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def env(monkeypatch):
    for k, v in {"HOROVOD_ELASTIC": "1", "HOROVOD_HOSTNAME": "hostb", "HOROVOD_LOCAL_RANK": "1",
                 "HOROVOD_RANK": "3", "HOROVOD_SIZE": "4", "HOROVOD_LOCAL_SIZE": "2",
                 "HOROVOD_CROSS_RANK": "1", "HOROVOD_CROSS_SIZE": "2"}.items():
        monkeypatch.setenv(k, v)


def test_reset_takes_the_place_the_driver_assigns(env):
    import os
    store = FakeDriverStore({"hostb:1": "1,2,0,1,1,2"})
    try:
        er.take_assignment_from_driver(store.client, time.monotonic() + 5)
    finally:
        store.close()
    got = {k: os.environ[f"HOROVOD_{k}"] for k in ("RANK", "SIZE", "LOCAL_RANK", "LOCAL_SIZE", "CROSS_RANK",
                                                   "CROSS_SIZE")}
    assert got == {"RANK": "1", "SIZE": "2", "LOCAL_RANK": "0", "LOCAL_SIZE": "1", "CROSS_RANK": "1",
                   "CROSS_SIZE": "2"}


def test_removed_worker_ends_with_horovods_message(env):
    store = FakeDriverStore({"hostb:1": "-1,-1,-1,-1,-1,-1"})
    try:
        with pytest.raises(RuntimeError, match=r"^hostb\[1\] has been removed from elastic job$"):
            er.take_assignment_from_driver(store.client, time.monotonic() + 5)
    finally:
        store.close()


def test_round_exchange_gathers_every_rank_in_a_fresh_scope():
    store = FakeDriverStore({})
    try:
        # A record left by an earlier round under the plain rank key is never read.
        store.data[("herring_elastic", "1")] = b"stale"
        deadline = time.monotonic() + 10
        out = {}
        threads = [threading.Thread(target=lambda r=r: out.__setitem__(
            r, er.round_exchange(store.client, r, 3, deadline)(f"record of {r}\nline 2"))) for r in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=15)
        scopes = {scope for scope, _ in store.data if scope.startswith("herring_elastic_")}
    finally:
        store.close()
    expected = [f"record of {r}\nline 2" for r in range(3)]
    assert out == {0: expected, 1: expected, 2: expected}
    assert len(scopes) == 1  # one round id, drawn by rank 0


# A store slow to answer: the deadline runs out while it answers a poll for rank 1's endpoint,
# and the error is still the wait's (which rank is missing), not the socket's "timed out".
@pytest.mark.parametrize("get_delay, seconds", [(0.0, 0.5), (0.4, 0.6)], ids=["quick-store", "slow-store"])
def test_round_exchange_has_a_deadline_naming_the_missing_rank(get_delay, seconds):
    store = FakeDriverStore({})
    store.get_delay = get_delay
    try:
        exchange = er.round_exchange(store.client, 0, 2, time.monotonic() + seconds)
        with pytest.raises(TimeoutError, match="the endpoint of rank 1 \\(of 2\\)"):
            exchange("mine")
    finally:
        store.close()


def test_a_store_slower_than_the_deadline_is_named_with_the_request(env):
    store = FakeDriverStore({"hostb:1": "1,2,0,1,1,2"})
    store.get_delay = 1.0
    try:
        with pytest.raises(TimeoutError, match="driver store 127.0.0.1:[0-9]+ did not answer before the deadline, "
                                               "reading .*/hostb:1"):
            er.take_assignment_from_driver(store.client, time.monotonic() + 0.3)
    finally:
        store.close()


def test_not_elastic_without_the_driver(monkeypatch):
    monkeypatch.delenv("HOROVOD_ELASTIC", raising=False)
    assert er.prepare_init(True) is None
