"""The simulated-cluster suite: multi-host goals, R2SP, batch tuning and PSLD across simulated hosts."""
