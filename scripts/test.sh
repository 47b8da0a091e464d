#!/usr/bin/env bash
# The README's test command: sets up (idempotent) and runs the whole test suite (what CI runs).
#   bash scripts/test.sh            the full suite
#   bash scripts/test.sh --fast     the fast tier: native unit tests and one multi-process smoke per
#                                   framework and launch path (tests/conftest.py lists it)
# Other arguments go to pytest.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup.sh"
# The DeepSpeed benchmark peer (pinned deepspeed in .venv, its shm op built once into .cache/deepspeed;
# about 2 minutes the first time, seconds after): tests/test_deepspeed_peer.py runs its worker.
bash "$ROOT/benchmarks/peers/setup_deepspeed.sh" >/dev/null
cd "$ROOT"
args=()
for a in "$@"; do
  if [ "$a" = "--fast" ]; then args+=(-m fast); else args+=("$a"); fi
done
exec "$ROOT/.venv/bin/pytest" tests "${args[@]}"
