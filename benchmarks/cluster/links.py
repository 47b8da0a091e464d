"""What crossed every simulated host's link while a job ran, and how busy the machine's CPUs were.

LinkSampler polls each host's eth0 byte counters (/proc/<host pid>/net/dev, read from outside the
host, so nothing runs inside the job) every `period` seconds on a thread of the harness, and the
machine's /proc/stat, so a benchmark can say, for a window of wall-clock time (the windows the
ranks recorded with time.time()), how many bytes each host sent and received, at what rate, and
whether the CPUs had any idle time left."""

import bisect
import threading
import time

from tools.simcluster.processes import ClusterError


def _cpu_times():
    """(busy, total) jiffies of all CPUs together."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)        # idle + iowait
    return sum(fields) - idle, sum(fields)


class LinkSampler:
    def __init__(self, cluster, period=0.02):
        self.cluster = cluster
        self.period = period
        self.hosts = list(cluster.host_names)
        self.times = []            # time.time() of each sample
        self.bytes = []            # per sample: [(received, sent) per host]
        self.cpu = []              # per sample: (busy, total) jiffies
        self._stop = threading.Event()
        self._thread = None
        self.error = None

    def __enter__(self):
        self._thread = threading.Thread(target=self._run, name="link-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=10)
        return False

    def _run(self):
        try:
            while not self._stop.is_set():
                row = [self.cluster.interface_bytes(h) for h in self.hosts]
                self.times.append(time.time())
                self.bytes.append(row)
                self.cpu.append(_cpu_times())
                self._stop.wait(self.period)
        except (OSError, ClusterError) as e:     # a host went away under us: keep what we have
            self.error = f"{type(e).__name__}: {e}"

    # -- reading ------------------------------------------------------------------------------
    def _interpolated(self, t):
        """Every counter at time t, linearly interpolated between the samples around it (clamped
        to the first and last sample): [(received, sent) per host], (busy, total)."""
        times = self.times
        j = bisect.bisect_left(times, t)
        if j <= 0:
            return self.bytes[0], self.cpu[0]
        if j >= len(times):
            return self.bytes[-1], self.cpu[-1]
        i = j - 1
        f = (t - times[i]) / (times[j] - times[i]) if times[j] > times[i] else 1.0

        def mix(a, b):
            return a + f * (b - a)

        rows = [(mix(a[0], b[0]), mix(a[1], b[1])) for a, b in zip(self.bytes[i], self.bytes[j])]
        return rows, (mix(self.cpu[i][0], self.cpu[j][0]), mix(self.cpu[i][1], self.cpu[j][1]))

    def window(self, start, end):
        """Bytes each host received and sent between wall-clock times start and end (counters
        interpolated between the samples around each end), and the CPUs' busy fraction; None if
        the sampler did not cover the window."""
        if len(self.times) < 2 or end <= start or start < self.times[0] or end > self.times[-1]:
            return None
        (a, cpu_a), (b, cpu_b) = self._interpolated(start), self._interpolated(end)
        hosts = {name: {"received": b[k][0] - a[k][0], "sent": b[k][1] - a[k][1]}
                 for k, name in enumerate(self.hosts)}
        total = cpu_b[1] - cpu_a[1]
        return {"seconds": end - start, "hosts": hosts,
                "cpu_busy": (cpu_b[0] - cpu_a[0]) / total if total > 0 else None}

    def trace(self, start, end, bin_seconds=0.05):
        """Per host, the send and receive rates (bits/s) in bins of `bin_seconds` over [start, end]
        (bins should be at least twice the sampling period to mean anything):
        {"t": [bin start - start], "hosts": {name: {"sent_bps": [...], "received_bps": [...]}}}."""
        out = {"t": [], "hosts": {h: {"sent_bps": [], "received_bps": []} for h in self.hosts}}
        t = start
        while t < end - 1e-9:
            w = self.window(t, min(end, t + bin_seconds))
            if w:
                out["t"].append(round(t - start, 4))
                for h, b in w["hosts"].items():
                    out["hosts"][h]["sent_bps"].append(round(8 * b["sent"] / w["seconds"]))
                    out["hosts"][h]["received_bps"].append(round(8 * b["received"] / w["seconds"]))
            t += bin_seconds
        return out
