"""Runs one of Horovod's own test suites inside this rank (as Horovod's parallel tests are run:
the same pytest command in every rank), writing a JUnit report per rank.

    python horovod_suite_rank.py <results dir> <pytest arguments...>

The report lands in <results dir>/rank<R>.xml, R from horovodrun's HOROVOD_RANK (mpirun's
OMPI_COMM_WORLD_RANK)."""

import os
import sys

import pytest


def main():
    results_dir, args = sys.argv[1], sys.argv[2:]
    rank = os.environ.get("HOROVOD_RANK") or os.environ.get("OMPI_COMM_WORLD_RANK", "0")  # horovodrun, mpirun
    report = os.path.join(results_dir, f"rank{rank}.xml")
    sys.exit(pytest.main(args + ["-p", "no:cacheprovider", f"--junitxml={report}"]))


if __name__ == "__main__":
    main()
