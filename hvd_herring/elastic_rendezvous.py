"""Elastic workers under horovodrun's elastic driver (`horovodrun --min-np/--max-np
--host-discovery-script`, which sets HOROVOD_ELASTIC=1).

The driver owns the membership: it spawns workers with their rank in the environment and, after
every reset, tells each surviving worker its new place when the worker asks its rendezvous server
for `rank_and_size/<host>:<local_rank>` (that request also tells the driver the worker is ready,
and blocks until every worker of the old round has said so). This module does the worker's part
before each engine is built:

- on a re-initialization (not the first init of the process), ask the driver for the new rank,
  size, local and cross ranks and put them into the environment the engine reads; a worker the
  driver dropped ends with Horovod's own message;
- exchange the engine's endpoint records through the driver's store in a scope of this round
  only. Old workers and the driver's replacements have different per-process init counters, so
  the engine's usual keys ("e<epoch>.<rank>") would not meet; instead rank 0 of the round draws a
  random round id, publishes it, and every rank's record goes under that id. The driver clears
  its store when it starts a round, and the id guards against a record left by an earlier one.

Nothing here decides membership: blacklisting, cooldown, --reset-limit and min/max np stay the
driver's."""

import os
import time

ROUND_SCOPE = "herring_elastic"       # holds the current round id (key "round")
ROUND_KEY = "round"
RANK_AND_SIZE_SCOPE = "rank_and_size"  # the driver's handler answers this scope itself


def is_elastic_job():
    """Launched by horovodrun's elastic driver (gloo mode, with its rendezvous server)."""
    return (os.environ.get("HOROVOD_ELASTIC") == "1"
            and bool(os.environ.get("HOROVOD_GLOO_RENDEZVOUS_ADDR"))
            and "HOROVOD_RANK" in os.environ)


def _seconds_from_env(name):
    """A knob in seconds: the environment's value, else the default of the one knob table."""
    from hvd_herring import _native
    default = next(k["default"] for k in _native.KNOBS if k["name"] == name)
    try:
        value = float(os.environ.get(name, default))
    except ValueError:
        raise ValueError(f"{name}={os.environ.get(name)!r} is not a number of seconds") from None
    if value <= 0:
        raise ValueError(f"{name}={value} must be positive")
    return value


class DriverStore:
    """Client of the elastic driver's HTTP key-value store (PUT/GET /<scope>/<key>; GET answers
    404 until the key exists and never blocks, except rank_and_size, which the driver holds until
    every worker of the round has asked)."""

    def __init__(self, addr, port):
        self.addr = addr
        self.port = int(port)

    def _request(self, method, path, body, deadline, what):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"elastic rendezvous: out of time before {what} "
                               f"(driver store {self.addr}:{self.port})")
        # Imported here: only elastic jobs reach this, and http.client (with email and ssl) was a
        # third of `import hvd_herring.basics`, which every rank of every job pays at start-up.
        import http.client
        conn = http.client.HTTPConnection(self.addr, self.port, timeout=remaining)
        try:
            conn.request(method, path, body=body)
            response = conn.getresponse()
            return response.status, response.read()
        except TimeoutError as e:  # the socket's, which says only "timed out"
            raise TimeoutError(f"elastic rendezvous: the driver store {self.addr}:{self.port} did not "
                               f"answer before the deadline, {what}") from e
        finally:
            conn.close()

    def get(self, scope, key, deadline):
        """The value, or None while the key does not exist."""
        status, data = self._request("GET", f"/{scope}/{key}", None, deadline, f"reading {scope}/{key}")
        if status == 404:
            return None
        if status != 200:
            raise RuntimeError(f"elastic rendezvous: the driver store {self.addr}:{self.port} answered "
                               f"{status} to GET {scope}/{key}")
        return data

    def put(self, scope, key, value, deadline):
        status, _ = self._request("PUT", f"/{scope}/{key}", value, deadline, f"writing {scope}/{key}")
        if status != 200:
            raise RuntimeError(f"elastic rendezvous: the driver store {self.addr}:{self.port} answered "
                               f"{status} to PUT {scope}/{key}")

    def wait_for(self, scope, key, deadline, waiting_for):
        """Polls until the key exists; the pause grows from 1 ms to 50 ms, so a round that is
        quick stays quick and a slow one costs the store little."""
        def late():
            return TimeoutError(f"elastic rendezvous: {waiting_for} did not arrive in the driver store "
                                f"{self.addr}:{self.port} before the deadline (key {scope}/{key})")

        pause = 0.001
        while True:
            try:
                value = self.get(scope, key, deadline)
            except TimeoutError as e:
                # The deadline passed inside a poll (a sleep that overran on a loaded machine, or a
                # store slow to answer): what is late is still what this waits for.
                raise late() from e
            if value is not None:
                return value
            if time.monotonic() + pause > deadline:
                raise late()
            time.sleep(pause)
            pause = min(pause * 2, 0.05)


def _store_from_env():
    return DriverStore(os.environ["HOROVOD_GLOO_RENDEZVOUS_ADDR"], os.environ["HOROVOD_GLOO_RENDEZVOUS_PORT"])


def take_assignment_from_driver(store, deadline):
    """Asks the driver where this worker is in the new round and sets HOROVOD_RANK, _SIZE,
    _LOCAL_RANK, _LOCAL_SIZE, _CROSS_RANK, _CROSS_SIZE (as Horovod's gloo controller does).
    Asked once per reset: the driver counts every such request as this worker being ready."""
    host = os.environ.get("HOROVOD_HOSTNAME", "localhost")
    local_rank = os.environ.get("HOROVOD_LOCAL_RANK", "0")
    old_rank = os.environ.get("HOROVOD_RANK")
    text = store.get(RANK_AND_SIZE_SCOPE, f"{host}:{local_rank}", deadline)
    if text is None:
        raise RuntimeError(f"elastic rendezvous: the driver does not answer rank_and_size for "
                           f"{host}[{local_rank}] (rank {old_rank} before the reset)")
    fields = text.decode("ascii").split(",")
    try:
        rank, size, new_local_rank, local_size, cross_rank, cross_size = (int(f) for f in fields)
    except ValueError:
        raise RuntimeError(f"elastic rendezvous: unexpected rank_and_size answer {text!r} for "
                           f"{host}[{local_rank}]") from None
    if rank == -1:
        # The driver dropped this slot (its host was removed or blacklisted): Horovod's message.
        raise RuntimeError(f"{host}[{local_rank}] has been removed from elastic job")
    os.environ.update({
        "HOROVOD_RANK": str(rank), "HOROVOD_SIZE": str(size),
        "HOROVOD_LOCAL_RANK": str(new_local_rank), "HOROVOD_LOCAL_SIZE": str(local_size),
        "HOROVOD_CROSS_RANK": str(cross_rank), "HOROVOD_CROSS_SIZE": str(cross_size),
    })


def round_exchange(store, rank, size, deadline):
    """The engine's record allgather for one round, through the driver's store."""

    def allgather(record):
        if rank == 0:
            # The kernel's CSPRNG, as secrets.token_hex: importing `secrets` (hmac, hashlib,
            # random) cost every rank 5 ms of start-up, and only elastic rank 0 needs it.
            round_id = os.urandom(8).hex()
            store.put(ROUND_SCOPE, ROUND_KEY, round_id.encode("ascii"), deadline)
        else:
            round_id = store.wait_for(ROUND_SCOPE, ROUND_KEY, deadline, "rank 0's round id").decode("ascii")
        scope = f"{ROUND_SCOPE}_{round_id}"
        store.put(scope, str(rank), record.encode("utf-8", "surrogateescape"), deadline)
        records = []
        for r in range(size):
            data = store.wait_for(scope, str(r), deadline, f"the endpoint of rank {r} (of {size})")
            records.append(data.decode("utf-8", "surrogateescape"))
        return records

    return allgather


def prepare_init(reinitializing):
    """Called by init() before the engine is built. Returns the record exchange the engine must
    use in an elastic job, or None outside one (the engine's own rendezvous is used then)."""
    if not is_elastic_job():
        return None
    store = _store_from_env()
    if reinitializing:
        # As long as the driver may wait for hosts (its --elastic-timeout, 600 s by default).
        wait = _seconds_from_env("HERRING_ELASTIC_RESET_TIMEOUT_SECONDS")
        take_assignment_from_driver(store, time.monotonic() + wait)
    start = _seconds_from_env("HERRING_START_TIMEOUT_SECONDS")
    return round_exchange(store, int(os.environ["HOROVOD_RANK"]), int(os.environ["HOROVOD_SIZE"]),
                          time.monotonic() + start)
