"""Reading and writing the scale results JSON (job records keyed by int rank become str keys)."""

import json
import os


def save(results, path):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump(results, f, indent=1, sort_keys=False)
    os.replace(path + ".tmp", path)


def load(path):
    with open(path) as f:
        return json.load(f)
