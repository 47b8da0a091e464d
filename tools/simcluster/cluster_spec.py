"""The description of a simulated cluster: hosts (name, ranks, role, group, link rate) and how
hosts reach each other. Plain data, loadable from a small JSON file:

    {
      "rate": "1gbit",                       # every host's link to its switch, both directions
      "hosts": [
        {"slots": 2, "group": "a"}, {"slots": 2, "group": "a"},
        {"slots": 2, "group": "b"}, {"slots": 2, "group": "b", "rate": "500mbit"},
        {"role": "server", "group": "b"}
      ],
      "intra": {"link": "shared", "rate": "400mbit"},   # pairs inside a group
      "cross": {"link": "direct", "rate": "1gbit"}      # pairs in different groups
    }

Each host has one port (eth0) on its group's switch, shaped at its rate in both directions.
A class of host pairs (`intra`: same group, `cross`: different groups) is reached through:
  - "switch" (default): the switches alone; groups' switches are joined by an unconstrained core;
  - "shared": one link of `rate` carries all of that traffic: per group for `intra` (every frame
    between two hosts of the group queues in one place), per group uplink for `cross` (each
    group reaches the core through one link of `rate`, each direction);
  - "direct": every such pair gets its own point-to-point link of `rate` (each direction).
Hosts without groups all sit on one switch. Host names default to simhost0, simhost1, ...
Hosts with role "server" get an address and an sshd like any other but are left out of
horovodrun's host list: they are where dedicated server shards will run.
"""

import json
import re
from dataclasses import dataclass, field, replace
from typing import Optional, Tuple

ROLES = ("worker", "server")
LINKS = ("switch", "shared", "direct")
FIRST_HOST_OCTET = 10          # host i gets <subnet>.<10 + i>
MAX_HOSTS = 240

_RATE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([a-z]*)\s*$", re.IGNORECASE)
# tc's units: *bit are bits per second, *bps are BYTES per second (as in tc(8)).
_UNITS = {"": 1, "bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12,
          "bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9, "tbps": 8e12}
_HOSTNAME = re.compile(r"^[a-z][a-z0-9-]{0,62}$")


class SpecError(ValueError):
    """A cluster description that cannot be built; the message says which field and why."""


def parse_rate(rate) -> Optional[int]:
    """'1gbit' -> 1000000000 bits/s (tc's units; 'mbps' means megaBYTES). None, '', 'none' or
    'unlimited' -> None (no shaping)."""
    if rate is None:
        return None
    if isinstance(rate, (int, float)):
        if rate <= 0:
            raise SpecError(f"rate {rate!r} must be positive")
        return int(rate)
    text = str(rate).strip().lower()
    if text in ("", "none", "unlimited"):
        return None
    m = _RATE.match(text)
    if not m or m.group(2).lower() not in _UNITS:
        raise SpecError(f"rate {rate!r} is not understood (examples: 1gbit, 500mbit, 100mbps; "
                        f"units {', '.join(u for u in _UNITS if u)})")
    bits = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if bits < 8000:
        raise SpecError(f"rate {rate!r} is below 8 kbit/s, too slow to carry a TCP handshake")
    return bits


@dataclass(frozen=True)
class HostSpec:
    name: str
    slots: int = 1
    role: str = "worker"
    group: Optional[str] = None
    rate: Optional[str] = None          # None: the cluster's rate

    @classmethod
    def from_dict(cls, d, index):
        unknown = set(d) - {"name", "slots", "role", "group", "rate"}
        if unknown:
            raise SpecError(f"hosts[{index}]: unknown field(s) {sorted(unknown)}")
        return cls(name=d.get("name", f"simhost{index}"), slots=int(d.get("slots", 1)),
                   role=d.get("role", "worker"), group=d.get("group"), rate=d.get("rate"))

    def to_dict(self):
        d = {"name": self.name, "slots": self.slots, "role": self.role}
        if self.group is not None:
            d["group"] = self.group
        if self.rate is not None:
            d["rate"] = self.rate
        return d


@dataclass(frozen=True)
class PathSpec:
    """How one class of host pairs reaches each other (see the module docstring)."""
    link: str = "switch"
    rate: Optional[str] = None

    @classmethod
    def from_dict(cls, d, what):
        if d is None:
            return cls()
        unknown = set(d) - {"link", "rate"}
        if unknown:
            raise SpecError(f"{what}: unknown field(s) {sorted(unknown)}")
        return cls(link=d.get("link", "switch"), rate=d.get("rate"))

    def to_dict(self):
        return {"link": self.link, "rate": self.rate}


@dataclass(frozen=True)
class ClusterSpec:
    hosts: Tuple[HostSpec, ...]
    rate: Optional[str] = "1gbit"
    mtu: int = 1500
    subnet: str = "10.77.0"             # a /24 that exists only inside the cluster's namespaces
    intra: PathSpec = field(default_factory=PathSpec)
    cross: PathSpec = field(default_factory=PathSpec)

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def uniform(cls, hosts, slots=1, rate="1gbit", servers=0, **kw):
        """`hosts` worker hosts with `slots` ranks each, then `servers` server-only hosts."""
        if hosts < 1:
            raise SpecError(f"hosts={hosts}: a cluster needs at least one worker host")
        specs = [HostSpec(f"simhost{i}", slots=slots) for i in range(hosts)]
        specs += [HostSpec(f"simhost{hosts + i}", slots=0, role="server") for i in range(servers)]
        return cls(hosts=tuple(specs), rate=rate, **kw).validated()

    @classmethod
    def from_dict(cls, d):
        unknown = set(d) - {"hosts", "rate", "mtu", "subnet", "intra", "cross"}
        if unknown:
            raise SpecError(f"unknown top-level field(s) {sorted(unknown)}")
        hosts = d.get("hosts")
        if isinstance(hosts, int):
            hosts = [{} for _ in range(hosts)]
        if not hosts:
            raise SpecError("'hosts' must be a non-empty list (or a count)")
        return cls(hosts=tuple(HostSpec.from_dict(h, i) for i, h in enumerate(hosts)),
                   rate=d.get("rate", "1gbit"), mtu=int(d.get("mtu", 1500)),
                   subnet=d.get("subnet", "10.77.0"),
                   intra=PathSpec.from_dict(d.get("intra"), "intra"),
                   cross=PathSpec.from_dict(d.get("cross"), "cross")).validated()

    @classmethod
    def load(cls, path):
        with open(path) as f:
            try:
                data = json.load(f)
            except json.JSONDecodeError as e:
                raise SpecError(f"{path}: not valid JSON: {e}") from None
        try:
            return cls.from_dict(data)
        except SpecError as e:
            raise SpecError(f"{path}: {e}") from None

    def to_dict(self):
        return {"rate": self.rate, "mtu": self.mtu, "subnet": self.subnet,
                "hosts": [h.to_dict() for h in self.hosts],
                "intra": self.intra.to_dict(), "cross": self.cross.to_dict()}

    def with_slots(self, slots):
        """The same cluster with every worker host running `slots` ranks."""
        return replace(self, hosts=tuple(replace(h, slots=slots) if h.role == "worker" else h
                                         for h in self.hosts))

    # -- checks -------------------------------------------------------------------------------
    def validated(self):
        if not 1 <= len(self.hosts) <= MAX_HOSTS:
            raise SpecError(f"{len(self.hosts)} hosts: between 1 and {MAX_HOSTS} are supported")
        parts = self.subnet.split(".")
        if len(parts) != 3 or not all(p.isdigit() and 0 <= int(p) <= 255 for p in parts):
            raise SpecError(f"subnet {self.subnet!r} must be the first three octets of a /24, e.g. 10.77.0")
        if not 576 <= self.mtu <= 65535:
            raise SpecError(f"mtu {self.mtu} must be between 576 and 65535")
        parse_rate(self.rate)
        names = set()
        for i, h in enumerate(self.hosts):
            where = f"hosts[{i}] ({h.name})"
            if not _HOSTNAME.match(h.name):
                raise SpecError(f"{where}: a host name is lower-case letters, digits and '-', starting with a letter")
            if h.name in names:
                raise SpecError(f"{where}: the name is used twice")
            names.add(h.name)
            if h.role not in ROLES:
                raise SpecError(f"{where}: role {h.role!r} is not one of {ROLES}")
            if h.role == "worker" and h.slots < 1:
                raise SpecError(f"{where}: a worker host needs slots >= 1")
            parse_rate(h.rate)
        if not self.workers():
            raise SpecError("no host has role 'worker'")
        if self.hosts[0].role != "worker":
            raise SpecError(f"hosts[0] ({self.hosts[0].name}) launches the job, so it must be a worker")
        grouped = [h.group is not None for h in self.hosts]
        if any(grouped) and not all(grouped):
            raise SpecError("either every host has a 'group' or none has")
        for what, path in (("intra", self.intra), ("cross", self.cross)):
            if path.link not in LINKS:
                raise SpecError(f"{what}.link {path.link!r} is not one of {LINKS}")
            if path.link != "switch":
                if not any(grouped):
                    raise SpecError(f"{what}.link {path.link!r} needs hosts with groups")
                if parse_rate(path.rate) is None:
                    raise SpecError(f"{what}.link {path.link!r} needs a rate")
        if self.cross.link != "switch" and len(self.groups()) < 2:
            raise SpecError(f"cross.link {self.cross.link!r} needs at least two groups")
        return self

    # -- derived ------------------------------------------------------------------------------
    def workers(self):
        return [i for i, h in enumerate(self.hosts) if h.role == "worker"]

    def servers(self):
        return [i for i, h in enumerate(self.hosts) if h.role == "server"]

    def groups(self):
        """Group name -> host indices, in order of first appearance ('' when ungrouped)."""
        out = {}
        for i, h in enumerate(self.hosts):
            out.setdefault(h.group if h.group is not None else "", []).append(i)
        return out

    def address(self, i):
        return f"{self.subnet}.{FIRST_HOST_OCTET + i}"

    def host_rate_bits(self, i):
        h = self.hosts[i]
        return parse_rate(h.rate if h.rate is not None else self.rate)

    def same_group(self, i, j):
        return self.hosts[i].group == self.hosts[j].group

    def host_list(self, slots=None):
        """horovodrun's -H value: every worker host with its slots."""
        return ",".join(f"{self.hosts[i].name}:{slots or self.hosts[i].slots}" for i in self.workers())
