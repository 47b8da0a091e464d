#!/usr/bin/env bash
# Fuzzes the wire decoders (fuzz/wire_decoders_fuzzer.cc: frame headers and every negotiation
# message) with libFuzzer + ASan + UBSan for SECONDS (default 600), keeping the corpus it grows in
# build/fuzz/corpus for the next run, and writes the figures into docs/reliability.md (section
# "Fuzzing") and benchmarks/results/reliability.json. Crashing inputs are kept in
# build/fuzz/crashes/.
#   bash scripts/fuzz.sh [SECONDS]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SECONDS_TO_FUZZ="${1:-600}"
bash "$ROOT/scripts/setup.sh"
cd "$ROOT"
out="$(mktemp /tmp/herring-fuzz-XXXXXX.json)"
trap 'rm -f "$out"' EXIT
"$ROOT/.venv/bin/python" fuzz/run_fuzzer.py --seconds "$SECONDS_TO_FUZZ" --corpus build/fuzz/corpus --json "$out"
"$ROOT/.venv/bin/python" -m reliability.reports fuzz "$out"
echo "[fuzz] figures in docs/reliability.md and benchmarks/results/reliability.json"
