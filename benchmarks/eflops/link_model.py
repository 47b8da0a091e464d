"""The bottleneck model of the EFLOPS scenario: each step of an allreduce algorithm is a set of
concurrent flows; a step lasts as long as its most loaded link needs (the model of
native/ops/topology_map.h, extended to the ring and to the parameter server's all-to-all). The
report puts its predictions beside the measured medians."""


class LinkModel:
    """The links of a cluster description as flows use them (same rules as native/ops/
    topology_map.cc): direct pairs have a link each per direction; a shared intra-group link
    carries both directions of every pair of its group; a shared cross path is one uplink and one
    downlink per group; switch paths are limited by the hosts' own links."""

    def __init__(self, spec):
        from tools.simcluster.cluster_spec import parse_rate
        self.spec = spec
        self.host_rate = [spec.host_rate_bits(i) for i in range(len(spec.hosts))]
        self.intra = (spec.intra.link, parse_rate(spec.intra.rate) or parse_rate(spec.rate))
        self.cross = (spec.cross.link, parse_rate(spec.cross.rate) or parse_rate(spec.rate))
        self.group = {i: spec.hosts[i].group for i in range(len(spec.hosts))}

    def links(self, a, b):
        if a == b:
            return []
        same = self.group[a] == self.group[b]
        kind, rate = self.intra if same else self.cross
        if kind == "direct":
            return [(("direct", a, b), rate)]
        out = [(("out", a), self.host_rate[a])]
        if kind == "shared":
            out += [(("group", self.group[a]), rate)] if same else \
                   [(("up", self.group[a]), rate), (("down", self.group[b]), rate)]
        return out + [(("in", b), self.host_rate[b])]

    def step_seconds(self, flows):
        load = {}
        for a, b, nbytes in flows:
            for link, rate in self.links(a, b):
                if rate:
                    load[link] = load.get(link, 0.0) + nbytes * 8 / rate
        return max(load.values(), default=0.0)

    def seconds(self, steps):
        return sum(self.step_seconds(s) for s in steps)


def ring_steps(n, size):
    """Reduce-scatter and all-gather around the ring of rank order: 2(n-1) steps of size/n."""
    return [[(i, (i + 1) % n, size / n) for i in range(n)] for _ in range(2 * (n - 1))]


def hd_steps(order, size):
    """order[v]: the rank at position v (rank order for hd; the engine's mapping for hd-topo)."""
    n = len(order)
    p = 1
    while p * 2 <= n:
        p *= 2
    k = p.bit_length() - 1
    fold = [[(order[p + i], order[i], size) for i in range(n - p)]] if n > p else []
    rounds = [[(order[v], order[v ^ (1 << j)], size / (2 << j)) for v in range(p)] for j in range(k)]
    unfold = [[(order[i], order[p + i], size) for i in range(n - p)]] if n > p else []
    return fold + rounds + rounds[::-1] + unfold


def ps_steps(n, size):
    """One server shard per rank: every rank pushes size/n to every other shard, then pulls the
    sums back (one rank per host: no shared-memory stage)."""
    push = [(i, j, size / n) for i in range(n) for j in range(n) if i != j]
    return [push, [(j, i, b) for i, j, b in push]]


def model_seconds(spec, stack, size, hd_topo_order):
    n = sum(h.slots for h in spec.hosts if h.role == "worker")
    m = LinkModel(spec)
    if stack == "ring":
        return m.seconds(ring_steps(n, size))
    if stack == "hd":
        return m.seconds(hd_steps(list(range(n)), size))
    if stack == "herring":
        return m.seconds(ps_steps(n, size))
    if stack == "hd-topo":
        return m.seconds(hd_steps(hd_topo_order, size)) if hd_topo_order else None
    raise ValueError(stack)


def predictions(entry, size):
    """{stack: modelled seconds} for one np of a run's results (hd-topo with the mapping the engine
    logged; None without it)."""
    from tools.simcluster.cluster_spec import ClusterSpec
    spec = ClusterSpec.from_dict(entry["cluster"])
    mapping = (entry["stacks"].get("hd-topo") or {}).get("mapping")
    order = mapping["order"] if mapping else None
    return {s: model_seconds(spec, s, size, order) for s in ("ring", "hd", "herring", "hd-topo")}
