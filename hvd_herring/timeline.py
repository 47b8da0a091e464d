"""Timelines written with HOROVOD_TIMELINE: one Chrome-trace file per rank.

    python -m hvd_herring.timeline merge merged.json timeline.json timeline.rank1.json ...

merges them into one file (ranks appear as processes). Timestamps come from each host's monotonic
clock: files of one host line up exactly; across hosts they are offset by the clocks' difference."""

import argparse
import json
import sys


def load(path):
    """Events of one timeline file (a JSON array)."""
    with open(path) as f:
        return json.load(f)


def merge(paths):
    events = []
    for p in paths:
        events.extend(load(p))
    return events


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("merge", help="merge per-rank timelines into one file")
    m.add_argument("output")
    m.add_argument("inputs", nargs="+")
    args = parser.parse_args(argv)
    with open(args.output, "w") as f:
        json.dump(merge(args.inputs), f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
