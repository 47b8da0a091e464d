"""The network of a simulated cluster, as shell scripts of `ip` and `tc` commands: one for the
fabric namespace (the switches: a Linux bridge per group, a core bridge joining them) and one
per host namespace (its eth0, its direct links, its routes).

Naming, unique inside each namespace (so two clusters never collide and the machine's own
namespace is never touched): in the fabric, bridge g<k> per group, core, host ports p<i>,
group uplinks u<k> (group side) / c<k> (core side), funnels f<k>; in host i, eth0 to its switch
and d<j> for a direct link to host j.

Shaping: tbf at the sending end of every link, so both directions of every link are shaped.
A "shared" intra-group link is an ifb device (f<k>) that every IPv4 frame between two hosts of
group k is redirected through on its way into the switch, so all of them queue in one tbf.
"""

from tools.simcluster.cluster_spec import parse_rate

# tbf: the bucket must hold a GSO super-packet (veth hands up to 64 KiB at once) and enough
# tokens for about 2 ms at the link rate (tbf refills on timer ticks; smaller buckets lose rate
# at high rates). The queue holds 20 ms of traffic before dropping: deep enough for TCP to fill
# the link, shallow enough not to add seconds of delay.
TBF_MIN_BURST = 128 * 1024
TBF_BURST_SECONDS = 0.002
TBF_LATENCY_MS = 20


def tbf(dev, rate):
    """The tc command that shapes `dev`'s egress to `rate` (a rate string or bits/s); '' if None."""
    bits = parse_rate(rate)
    if bits is None:
        return ""
    burst = max(TBF_MIN_BURST, int(bits / 8 * TBF_BURST_SECONDS))
    return f"tc qdisc replace dev {dev} root tbf rate {bits}bit burst {burst} latency {TBF_LATENCY_MS}ms"


class FabricPlan:
    """The scripts that build `spec`'s network, given the PIDs holding each namespace."""

    def __init__(self, spec):
        self.spec = spec
        self.group_names = list(spec.groups())
        self.group_of = {}
        for k, name in enumerate(self.group_names):
            for i in spec.groups()[name]:
                self.group_of[i] = k

    def direct_pairs(self):
        """Host pairs (i < j) joined by a point-to-point link of their own, with its rate."""
        spec, out = self.spec, []
        n = len(spec.hosts)
        for i in range(n):
            for j in range(i + 1, n):
                path = spec.intra if spec.same_group(i, j) else spec.cross
                if path.link == "direct":
                    out.append((i, j, path.rate))
        return out

    def _needs_core(self):
        return len(self.group_names) > 1 and self.spec.cross.link != "direct"

    def fabric_script(self, host_pids):
        """Run inside the fabric namespace: switches, host ports and the links into each host's
        namespace (created there directly, by PID), direct links between hosts, shaping."""
        spec, mtu = self.spec, self.spec.mtu
        lines = ["set -e", "ip link set lo up"]
        for k, _ in enumerate(self.group_names):
            lines += [f"ip link add name g{k} mtu {mtu} type bridge stp_state 0",
                      f"ip link set g{k} up"]
        if self._needs_core():
            lines += [f"ip link add name core mtu {mtu} type bridge stp_state 0", "ip link set core up"]
            uplink_rate = spec.cross.rate if spec.cross.link == "shared" else None
            for k, _ in enumerate(self.group_names):
                lines += [f"ip link add name u{k} mtu {mtu} type veth peer name c{k} mtu {mtu}",
                          f"ip link set u{k} master g{k} up", f"ip link set c{k} master core up",
                          tbf(f"u{k}", uplink_rate), tbf(f"c{k}", uplink_rate)]
        if spec.intra.link == "shared":
            for k, _ in enumerate(self.group_names):
                lines += [f"ip link add name f{k} mtu {mtu} type ifb", f"ip link set f{k} up",
                          tbf(f"f{k}", spec.intra.rate)]
        for i, pid in enumerate(host_pids):
            k = self.group_of[i]
            lines += [f"ip link add name p{i} mtu {mtu} type veth peer name eth0 netns {pid} mtu {mtu}",
                      f"ip link set p{i} master g{k} up",
                      tbf(f"p{i}", spec.host_rate_bits(i))]
            if spec.intra.link == "shared":
                peers = [j for j in spec.groups()[self.group_names[k]] if j != i]
                if peers:
                    lines.append(f"tc qdisc add dev p{i} handle ffff: ingress")
                for j in peers:
                    lines.append(f"tc filter add dev p{i} parent ffff: protocol ip u32 match ip dst "
                                 f"{spec.address(j)}/32 action mirred egress redirect dev f{k}")
        for i, j, _ in self.direct_pairs():
            lines.append(f"ip link add name d{j} mtu {mtu} netns {host_pids[i]} type veth "
                         f"peer name d{i} mtu {mtu} netns {host_pids[j]}")
        return "\n".join(line for line in lines if line) + "\n"

    def host_script(self, i):
        """Run inside host i's network namespace once the fabric script made its links."""
        spec = self.spec
        me = spec.address(i)
        lines = ["set -e",
                 # Direct links carry traffic for another interface's address: no reverse-path
                 # filtering (set before the links come up, for 'default' to apply).
                 "echo 0 > /proc/sys/net/ipv4/conf/all/rp_filter",
                 "echo 0 > /proc/sys/net/ipv4/conf/default/rp_filter",
                 "ip link set lo up",
                 f"ip addr add {me}/24 dev eth0",
                 "ip link set eth0 up",
                 tbf("eth0", spec.host_rate_bits(i))]
        for a, b, rate in self.direct_pairs():
            if i not in (a, b):
                continue
            peer = b if a == i else a
            lines += [f"echo 0 > /proc/sys/net/ipv4/conf/d{peer}/rp_filter",
                      f"ip link set d{peer} up",
                      f"ip route add {spec.address(peer)}/32 dev d{peer} src {me}",
                      tbf(f"d{peer}", rate)]
        return "\n".join(line for line in lines if line) + "\n"

    def describe(self):
        """One line per kind of link, for logs and reports."""
        spec = self.spec
        rates = sorted({str(spec.hosts[i].rate or spec.rate) for i in range(len(spec.hosts))})
        out = [f"{len(spec.hosts)} hosts on {len(self.group_names)} switch(es), host links {'/'.join(rates)}"]
        if len(self.group_names) > 1 or spec.intra.link != "switch":
            out.append(f"intra-group: {spec.intra.link}" + (f" {spec.intra.rate}" if spec.intra.rate else ""))
            out.append(f"cross-group: {spec.cross.link}" + (f" {spec.cross.rate}" if spec.cross.rate else ""))
        return "; ".join(out)
