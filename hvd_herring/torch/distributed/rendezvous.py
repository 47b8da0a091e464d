"""How torch.distributed and the herring engine meet.

- torchrun (env://): the engine takes rank and size from torch's variables (native
  rendezvous/launch_env.cc) and exchanges its endpoints through the Store torch hands to the
  backend creator (`store_exchange`).
- horovodrun / mpirun: torch's env:// finds no RANK or MASTER_ADDR there. The env:// handler is
  wrapped so that, under those launchers only, the engine starts first (through the launcher's
  own rendezvous), and rank 0 opens a TCPStore whose address the engine broadcasts: torch gets a
  real job-wide Store, with rank and size from the one place they come from, the engine.
- new_group: the engine's process sets are created by a collective of every rank, while torch
  calls a backend's creator on the group's members only. So torch's group constructor is wrapped
  to create the process set on every rank first; the creator then picks it up.
"""

import fcntl
import importlib
import inspect
import os
import socket
import struct

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

# The module, not the function torch.distributed re-exports under the same name.
torch_rendezvous = importlib.import_module("torch.distributed.rendezvous")

from hvd_herring import bootstrap
from hvd_herring.engine_front import DTYPES, front

_ADDRESS_BYTES = 256


def prepare_engine_environment():
    """Subgroups (new_group) are dynamic process sets: allow them before the engine starts. Every
    rank runs this same code, so the knob matches everywhere."""
    os.environ.setdefault("HOROVOD_DYNAMIC_PROCESS_SETS", "1")


def _store_host(store):
    """The host of the TCPStore under torch's wrappers (PrefixStore), or None (FileStore...)."""
    while store is not None:
        if isinstance(store, dist.TCPStore):
            return store.host
        store = getattr(store, "underlying_store", None)
    return None


def launch_environment(rank, size, store=None):
    """The environment the engine reads its place in the job from, when torch.distributed starts
    it: the rank and size torch handed the backend (init_process_group(rank=, world_size=), the
    tcp://, file:// and store= paths, mp.spawn) win over whatever the process environment says.
    Without torchrun's local layout the engine asks whether the job may be all on this host
    (loopback endpoints) by MASTER_ADDR: a tcp:// store names it."""
    return bootstrap.launch_environment(rank, size, master_addr=_store_host(store))


def store_exchange(store, rank, size, timeout_seconds):
    """The engine's endpoint exchange (mine -> every rank's record) through a torch Store. Under
    torchrun that Store is its agent's, which outlives the workers: after a restart
    (--max-restarts) it still holds the first attempt's records, so the exchange reads only
    records this attempt wrote (bootstrap.store_allgather names the attempt through the store)."""
    return bootstrap.store_allgather(store, rank, size, f"herring/endpoints/{size}/", timeout_seconds)


# --- horovodrun / mpirun under env:// ------------------------------------------------------------

def _launched_by_horovod_launcher():
    return ("HOROVOD_RANK" in os.environ or "OMPI_COMM_WORLD_RANK" in os.environ) and "RANK" not in os.environ


def _interface_address(name):
    """IPv4 address of a network interface (SIOCGIFADDR)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name[:15].encode()))
    return socket.inet_ntoa(packed[20:24])


def _store_address_for_peers():
    """The address at which the other ranks reach rank 0's store."""
    if len(set(front.engine().hostnames)) == 1:
        return "127.0.0.1"
    iface = os.environ.get("HERRING_IFACE") or os.environ.get("HOROVOD_GLOO_IFACE")
    if iface:
        return _interface_address(iface)
    return socket.gethostbyname(socket.gethostname())


def _broadcast_text(text, timeout_seconds):
    """Rank 0's `text` on every rank, through the engine (a broadcast of a fixed-size byte tensor)."""
    data = text.encode()
    if len(data) > _ADDRESS_BYTES:
        raise ValueError(f"herring: store address {text!r} is too long")
    buf = torch.zeros(_ADDRESS_BYTES, dtype=torch.uint8)
    buf[:len(data)] = torch.tensor(list(data), dtype=torch.uint8)
    handle = front.enqueue("broadcast", "herring.torch.store_address", 0, DTYPES["uint8"], front.Sum, 1.0, 1.0,
                            0, [(buf.data_ptr(), buf.data_ptr(), [_ADDRESS_BYTES], [])])
    front.wait_simple(handle, timeout_seconds)
    return bytes(buf.tolist()).rstrip(b"\0").decode()


def _launcher_rendezvous(timeout):
    """env:// under horovodrun or mpirun: the engine first, then a TCPStore hosted by rank 0."""
    prepare_engine_environment()
    if not front.is_initialized():
        front.start()
        front.leaves_at_exit = True  # torch's ranks finish one at a time (engine/departures.cc)
    engine = front.engine()
    rank, size = engine.rank, engine.size
    if rank == 0:
        store = dist.TCPStore("0.0.0.0", 0, size, True, timeout=timeout, wait_for_workers=False)
        _broadcast_text(f"{_store_address_for_peers()}:{store.port}", timeout.total_seconds())
    else:
        host, port = _broadcast_text("", timeout.total_seconds()).rsplit(":", 1)
        store = dist.TCPStore(host, int(port), size, False, timeout=timeout)
    yield store, rank, size
    raise RuntimeError("herring: re-rendezvous under horovodrun/mpirun is not supported")


_torch_env_handler = None


def _env_handler(url, timeout=c10d.default_pg_timeout, **kwargs):
    if _launched_by_horovod_launcher():
        return _launcher_rendezvous(timeout)
    return _torch_env_handler(url, timeout=timeout, **kwargs)


def install_env_rendezvous():
    global _torch_env_handler
    handlers = torch_rendezvous._rendezvous_handlers
    if handlers.get("env") is _env_handler:
        return
    _torch_env_handler = handlers["env"]
    handlers["env"] = _env_handler  # torch's API refuses to replace a scheme; the table is the hook


# --- new_group -> process sets -------------------------------------------------------------------

# sorted global ranks -> process set id, created on every rank by the wrapped group constructor.
subgroup_sets = {}

_torch_new_group_with_tag = None


def _uses_herring(backend):
    if backend is None:
        default = c10d._world.default_pg
        return default is not None and c10d.get_backend(default) == "herring"
    return "herring" in str(backend).lower()


def ensure_process_set(ranks):
    """The process set of these global ranks, created by a collective of every rank if needed."""
    ranks = sorted(int(r) for r in ranks)
    for set_id, members in front.process_sets().items():
        if sorted(members) == ranks:
            return set_id
    try:
        set_id = front.add_process_set(ranks)
    except Exception as e:
        raise RuntimeError(f"herring: creating the process set of new_group({ranks}) failed: {e} (subgroups need "
                           "HOROVOD_DYNAMIC_PROCESS_SETS=1 when the engine was started by hvd.init())") from e
    if set_id is None:
        return ensure_process_set(ranks)
    return set_id


def _new_group_with_tag(*args, **kwargs):
    bound = inspect.signature(_torch_new_group_with_tag).bind(*args, **kwargs)
    bound.apply_defaults()
    ranks, backend = bound.arguments.get("ranks"), bound.arguments.get("backend")
    if ranks and _uses_herring(backend) and front.is_initialized():
        ranks = sorted(int(r) for r in ranks)
        if len(ranks) < front.size():
            if bound.arguments.get("use_local_synchronization"):
                raise NotImplementedError(
                    "herring: new_group(use_local_synchronization=True) is not supported: its process set is "
                    "created by every rank; call new_group on every rank")
            subgroup_sets[tuple(ranks)] = ensure_process_set(ranks)
    return _torch_new_group_with_tag(*args, **kwargs)


def install_new_group_hook():
    global _torch_new_group_with_tag
    if c10d._new_group_with_tag is _new_group_with_tag:
        return
    _torch_new_group_with_tag = c10d._new_group_with_tag
    c10d._new_group_with_tag = _new_group_with_tag  # new_group and new_subgroups look it up here
