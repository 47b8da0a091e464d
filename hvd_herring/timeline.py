"""Timelines written with HOROVOD_TIMELINE (or hvd.start_timeline): one Chrome-trace file per rank
in Horovod's format (every lane a trace process: pid 0 the file's metadata, then one pid per
tensor, named `allreduce.<name>`...).

    python -m hvd_herring.timeline merge merged.json timeline.json timeline.rank1.json ...

merges them into one file: each rank becomes a process and its lanes become threads of it.
Timestamps come from each host's monotonic clock: files of one host line up exactly; across hosts
they are offset by the clocks' difference."""

import argparse
import json
import sys


def load(path):
    """Events of one timeline file (a JSON array). The writer keeps the file valid JSON after every
    event; a file whose last write was cut short (the disk filled, the machine died mid-write) is
    read up to its last whole event."""
    with open(path) as f:
        text = f.read()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        end = text.rfind("}")
        while end > 0:
            try:
                return json.loads(text[:end + 1] + "]")
            except json.JSONDecodeError:
                end = text.rfind("}", 0, end)
        raise


def merge(paths):
    """The events of every rank's file (rank = position in `paths`) with pid = rank, tid = lane."""
    events = []
    for rank, p in enumerate(paths):
        for e in load(p):
            e = dict(e)
            lane = e.get("pid")
            if e.get("ph") == "M":
                if lane == 0:
                    if e.get("name") == "process_name":
                        e["args"] = dict(e.get("args", {}), name=f"rank {rank}")
                    e["pid"] = rank
                    events.append(e)
                    continue
                e["name"] = {"process_name": "thread_name", "process_sort_index": "thread_sort_index"}.get(
                    e.get("name"), e.get("name"))
            if lane is not None:
                e["pid"], e["tid"] = rank, lane
            events.append(e)
    return events


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("merge", help="merge per-rank timelines into one file (ranks in the order given)")
    m.add_argument("output")
    m.add_argument("inputs", nargs="+")
    args = parser.parse_args(argv)
    with open(args.output, "w") as f:
        json.dump(merge(args.inputs), f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
