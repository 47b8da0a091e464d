#!/usr/bin/env bash
# The README's demo command: sets up what it needs (setup.sh --demo, idempotent), then trains examples/pytorch_train.py on 4
# ranks with an unchanged Horovod script, every collective on the herring engine.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup.sh" --demo
cd "$ROOT"
export PATH="$ROOT/.venv/bin:$PATH"
HOROVOD_BACKEND=herring exec horovodrun --gloo -np "${NP:-4}" -H "localhost:${NP:-4}" \
  python examples/pytorch_train.py "$@"
