#!/usr/bin/env bash
# The soak (opt-in): np=4, 10,000 steps of 200 allreduces, resident memory, open file descriptors
# and threads of every rank sampled every 500 steps; fails if they do not stay flat. Writes the
# figures into docs/reliability.md (section "Soak") and benchmarks/results/reliability.json. Run it
# on a quiet machine: the time per step is part of the report. Shape: SOAK_STEPS, SOAK_TENSORS,
# SOAK_SAMPLE_EVERY.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup.sh"
cd "$ROOT"
out="$(mktemp /tmp/herring-soak-XXXXXX.json)"
trap 'rm -f "$out"' EXIT
start=$SECONDS
load_start="$(cut -d' ' -f1 /proc/loadavg)"
HERRING_SOAK=1 HERRING_SOAK_JSON="$out" "$ROOT/.venv/bin/pytest" -q -s tests/reliability/test_soak.py "$@"
load_end="$(cut -d' ' -f1 /proc/loadavg)"
"$ROOT/.venv/bin/python" - "$out" "$load_start" "$load_end" <<'PY'
import json, sys, time
p, start, end = sys.argv[1:4]
r = json.load(open(p))
r["date"] = time.strftime("%Y-%m-%d")
r["load"] = f"{start} at the start, {end} at the end (1-minute averages)"
json.dump(r, open(p, "w"))
PY
"$ROOT/.venv/bin/python" -m reliability.reports soak "$out"
echo "[soak] done in $((SECONDS - start)) s; figures in docs/reliability.md and benchmarks/results/reliability.json"
