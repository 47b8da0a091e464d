"""Reliability measurements that regenerate the figures of docs/reliability.md: the comparison with
Horovod-gloo and torch.distributed gloo (compare_peers), the fault scenarios (scenarios), and the
report writers used by scripts/soak.sh and scripts/fuzz.sh (reports)."""
