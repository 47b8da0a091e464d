"""The test suite (tests/README.md). A package so that pytest keeps tests/ itself off sys.path:
an area folder such as tests/tensorflow/ must never be importable as `tensorflow`."""
