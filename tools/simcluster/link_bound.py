"""The link bound of a simulated cluster, measured: iperf3 between two hosts over the same shaped
links a job uses, so benchmarks can report "% of link bound" against a number measured in the
same run rather than the configured rate."""

import json
import shutil
import subprocess
import time
from dataclasses import dataclass
from typing import Optional

from tools.simcluster.processes import ClusterError, kill_group

IPERF_PORT = 5201


@dataclass
class LinkMeasurement:
    src: str
    dst: str
    seconds: float
    streams: int
    bidirectional: bool
    sent_bps: float                    # src -> dst, received bits per second
    reverse_bps: Optional[float]       # dst -> src at the same time (bidirectional only)
    configured_bps: Optional[int]      # the configured rate of the path (the slower host's link)

    def describe(self):
        def g(bps):
            return f"{bps / 1e9:.3f} Gbit/s"
        out = f"{self.src} -> {self.dst}: {g(self.sent_bps)}"
        if self.reverse_bps is not None:
            out += f", {self.dst} -> {self.src} at the same time: {g(self.reverse_bps)}"
        if self.configured_bps:
            out += f" (configured {g(self.configured_bps)}: {100 * self.sent_bps / self.configured_bps:.1f}%)"
        return out + f" [iperf3, {self.streams} stream(s), {self.seconds:g} s]"


def _wait_listening(cluster, host, port, server, deadline):
    while time.monotonic() < deadline:
        if server.poll() is not None:
            out = server.stdout.read() if server.stdout else ""
            raise ClusterError(f"iperf3 server on {cluster._name(host)} exited ({server.returncode}): {out}")
        if cluster.listening(host, port):
            return
        time.sleep(0.01)
    raise ClusterError(f"iperf3 server on {cluster._name(host)} did not listen on port {port} in time")


def measure_link(cluster, src, dst, seconds=3.0, streams=1, bidirectional=False, timeout=60, port=IPERF_PORT):
    """Sends from host `src` to host `dst` (indices or names) for `seconds` with iperf3 and
    returns what arrived. bidirectional=True sends both ways at once (full duplex check)."""
    if shutil.which("iperf3") is None:
        raise ClusterError("iperf3 is not installed (Debian package iperf3; scripts/setup.sh installs it)")
    s, d = cluster._index(src), cluster._index(dst)
    if s == d:
        raise ClusterError("measure_link needs two different hosts")
    deadline = time.monotonic() + timeout
    server = cluster.popen(d, ["iperf3", "--server", "--one-off", "--port", str(port),
                               "--bind", cluster.address(d)],
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait_listening(cluster, d, port, server, deadline)
        argv = ["iperf3", "--client", cluster.address(d), "--port", str(port), "--time", f"{seconds:g}",
                "--parallel", str(streams), "--json"]
        if bidirectional:
            argv.append("--bidir")
        run = cluster.run(s, argv, timeout=max(1.0, deadline - time.monotonic()))
        if run.returncode != 0:
            raise ClusterError(f"iperf3 {cluster._name(s)} -> {cluster._name(d)} failed ({run.returncode}):\n"
                               f"{run.output[-3000:]}")
        report = json.loads(run.output)
    finally:
        kill_group(server)
        if server in cluster._commands:
            cluster._commands.remove(server)
    end = report["end"]
    forward = end.get("sum_received", end.get("sum", {}))["bits_per_second"]
    reverse = end["sum_received_bidir_reverse"]["bits_per_second"] if bidirectional else None
    return LinkMeasurement(src=cluster._name(s), dst=cluster._name(d), seconds=seconds, streams=streams,
                           bidirectional=bidirectional, sent_bps=forward, reverse_bps=reverse,
                           configured_bps=_path_rate(cluster.spec, s, d))


def _path_rate(spec, s, d):
    """The configured rate of the path: the slower of the two hosts' links (None: unshaped)."""
    rates = [r for r in (spec.host_rate_bits(s), spec.host_rate_bits(d)) if r]
    return min(rates) if rates else None
