"""The scale benchmark's presets: which N on how many hosts, how many iterations, which peers.

- smoke: 16 and 32 ranks on 4 hosts, few iterations, a 1 MiB large allreduce, no peer
  (the test runs it end to end; under 3 minutes on this machine);
- full: 16, 64, 128 and 256 ranks on 16 hosts (the issue's suite), a 64 MiB large allreduce
  where it fits in memory, Horovod-gloo at 16 and 64 where it fits and starts."""

MiB = 1 << 20

PRESETS = {
    "smoke": {"hosts": 4, "ns": [16, 32], "warmup": 5, "iters": 30, "big_bytes": 1 * MiB, "big_iters": 2,
              "peer_ns": [], "rtt_iters": 300,
              "calibration_ns": [16]},
    "full": {"hosts": 16, "ns": [16, 64, 128, 256], "warmup": 20, "iters": 200, "big_bytes": 64 * MiB,
             "big_iters": 3, "peer_ns": [16, 64], "rtt_iters": 2000,
             "calibration_ns": [16, 64]},
}

# Memory rule for the large allreduce (in place: one buffer per rank) and for the peer's ranks:
# launch only if N x the per-rank need x this margin fits in what the machine has available
# minus a reserve for the other work sharing it.
MEMORY_MARGIN = 1.5
MEMORY_RESERVE_BYTES = 6 << 30
# What a Horovod-with-PyTorch rank needs before its first measured run (torch + horovod imported);
# replaced by the measured RSS once the peer ran at a smaller N.
PEER_RANK_BYTES_GUESS = 350 * MiB


def deadline_seconds(n):
    """Each launch's deadline: generous, 2 cores run every rank."""
    return 180 + 3 * n


def start_timeout_seconds(n):
    """HERRING_START_TIMEOUT_SECONDS for a launch of n ranks (the engine's default, 60 s, is meant
    for a dozen ranks; starting 256 Pythons on 2 cores alone takes about a minute): a rank still
    without its mesh after this long fails with the engine's own timeout, before the deadline."""
    return 120 + n // 2
