#!/usr/bin/env bash
# The README's test command: sets up (idempotent) and runs the test suite (what CI runs).
#   bash scripts/test.sh            the suite but its separate tiers (what CI runs)
#   bash scripts/test.sh --all      the whole suite, the separate tiers too (tests/README.md lists
#                                   them; `-m <tier>` or the tier's folder runs one)
#   bash scripts/test.sh --fast     the fast tier: native unit tests and one multi-process smoke per
#                                   framework and launch path (tests/README.md lists it)
# Other arguments go to pytest. The files run in two pytest-xdist workers, one file at a time each
# (their multi-process jobs leave a core idle while they wait on each other, on a peer's deadline or
# on a launcher); files marked `exclusive` run alone (tests/README.md). HERRING_TEST_WORKERS=1: one
# process runs everything in turn.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup.sh"
# The DeepSpeed benchmark peer (pinned deepspeed in .venv, its shm op built once into .cache/deepspeed;
# about 2 minutes the first time, seconds after): tests/benchmarks/test_deepspeed_peer.py runs its worker.
bash "$ROOT/benchmarks/peers/setup_deepspeed.sh" >/dev/null
cd "$ROOT"
args=()
paths=()   # test folders, files or ids named on the command line; the whole tests/ directory when none
for a in "$@"; do
  case "$a" in
    --fast) args+=(-m fast) ;;
    --all) args+=(--all-tiers) ;;
    -*) args+=("$a") ;;
    tests/*|*.py|*::*) paths+=("$a") ;;
    *) args+=("$a") ;;
  esac
done
[ ${#paths[@]} -gt 0 ] || paths=(tests)
workers="${HERRING_TEST_WORKERS:-2}"
if [ "$workers" -gt 1 ]; then
  args=(-n "$workers" --dist loadfile --no-loadscope-reorder "${args[@]}")
  # Every worker must collect the same tests in the same order, and torchft's own test classes
  # (tests/torch_distributed/test_torchft.py) name their cases from a set of strings, whose order
  # follows the per-process hash seed: one seed for the run (pytest-xdist's known limitation).
  export PYTHONHASHSEED="${PYTHONHASHSEED:-0}"
fi
exec "$ROOT/.venv/bin/pytest" "${paths[@]}" "${args[@]}"
