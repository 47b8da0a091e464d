"""Reading what the workers wrote (benchmarks/workers/*_worker.py): rank 0 appends one JSON record
per line per measurement, and a failing rank an error record (a record with an "error" key)."""

import json
import os


def read_records(path):
    """(records, errors) of a worker's results file; both empty if the job never wrote it."""
    records, errors = [], []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                rec = json.loads(line)
                (errors if "error" in rec else records).append(rec)
    return records, errors
