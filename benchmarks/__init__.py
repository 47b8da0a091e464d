"""Benchmarks of herring against the stacks Horovod users have: `python -m benchmarks.run`."""
