"""Runs inside every rank: applies this rank's part of HERRING_TEST_RANK_SETUP (JSON: rank ->
{"env": {...}, "cwd": dir}) the way a per-host shell profile or working directory would, then calls
the engine's init() (no framework imported: the test is about init). Writes
<HERRING_TEST_RESULTS>/<rank>.json: {"error": message} if init() raised, else {"error": null}."""

import json
import os

rank = os.environ["HOROVOD_RANK"]
setup = json.loads(os.environ.get("HERRING_TEST_RANK_SETUP", "{}")).get(rank, {})
os.environ.update(setup.get("env", {}))
results = os.environ["HERRING_TEST_RESULTS"]
if "cwd" in setup:
    os.chdir(setup["cwd"])

from hvd_herring.basics import basics  # noqa: E402 (after this rank's environment is in place)

error = None
try:
    basics.init()
except Exception as e:  # what a user's hvd.init() would raise
    error = f"{type(e).__name__}: {e}"
with open(os.path.join(results, f"{rank}.json"), "w") as f:
    json.dump({"error": error}, f)
if error is None:
    basics.shutdown()
