#!/usr/bin/env bash
# The benchmark command on a fresh clone: sets up .venv (scripts/setup.sh, idempotent: it also
# installs the plotting requirements), then runs every stack of the single-host suite and writes
# docs/benchmarks.md, docs/img/*.png and benchmarks/results/single_host.json. The
# Horovod-with-PyTorch peer is built on first use into .cache/horovod-torch (about 5 minutes once).
# Arguments go to `python -m benchmarks.single_host.run` (e.g. --preset quick; --help lists them).
# The full run takes about half an hour on 2 cores: run it on a quiet machine.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/setup.sh
exec "$ROOT/.venv/bin/python" -m benchmarks.single_host.run "$@"
