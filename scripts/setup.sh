#!/usr/bin/env bash
# Sets up everything hvd_herring needs, idempotently: system packages (Open MPI), .venv with
# the pinned Python packages, Horovod 0.28.1 (without frameworks: its launcher and Python layers),
# and this package built from source. Fast the second time: each step has a stamp.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="$ROOT/.venv"
STAMPS="$VENV/.herring-stamps"
PY="$VENV/bin/python"
say() { echo "[setup] $*"; }

# 1. System packages: mpirun for the MPI launch path, a C++ compiler and CMake for the core.
need_apt=()
command -v mpirun >/dev/null 2>&1 || need_apt+=(openmpi-bin libopenmpi-dev)
command -v cmake >/dev/null 2>&1 || need_apt+=(cmake)
command -v g++ >/dev/null 2>&1 || need_apt+=(g++)
if [ ${#need_apt[@]} -gt 0 ]; then
  say "installing system packages: ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

# 2. The virtual environment and pinned packages.
[ -x "$PY" ] || { say "creating .venv"; python3 -m venv "$VENV"; }
mkdir -p "$STAMPS"
stamp_ok() { [ -f "$STAMPS/$1" ] && [ "$(cat "$STAMPS/$1")" = "$2" ]; }
req_hash=$(sha256sum requirements/base.txt | cut -d' ' -f1)
if ! stamp_ok requirements "$req_hash"; then
  say "installing requirements/base.txt"
  "$PY" -m pip install -q --upgrade pip 2>&1 | grep -v "^WARNING: Location" || true
  "$PY" -m pip install -q -r requirements/base.txt 2>&1 | grep -v "^WARNING: Location" || true
  "$PY" -c "import torch, numpy, pybind11, pytest, mpi4py" || { echo "[setup] requirements failed" >&2; exit 1; }
  echo "$req_hash" > "$STAMPS/requirements"
fi

# 3. Horovod 0.28.1 without frameworks: horovodrun and Horovod's pure-Python layers. (Its build
#    needs the system cmake: a pip-installed cmake breaks inside its isolated build.)
if ! stamp_ok horovod "0.28.1"; then
  say "installing horovod 0.28.1 (no frameworks, about 1 minute)"
  HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 \
    "$PY" -m pip install -q --no-cache-dir horovod==0.28.1 2>&1 | grep -v "^WARNING: Location" || true
  "$PY" -c "import horovod, horovod.runner" || { echo "[setup] horovod failed" >&2; exit 1; }
  echo "0.28.1" > "$STAMPS/horovod"
fi

# 4. This package, rebuilt when its sources change (CMake keeps build/cmake: incremental).
src_hash=$(cat setup.py pyproject.toml CMakeLists.txt hvd_herring_switch.pth scripts/setup.sh \
           $(find native hvd_herring -type f \( -name '*.cc' -o -name '*.h' -o -name '*.py' \) | sort) \
           | sha256sum | cut -d' ' -f1)
if ! stamp_ok package "$src_hash"; then
  say "building and installing hvd_herring"
  "$PY" -m pip install -q --no-build-isolation --no-deps . 2>&1 | grep -v "^WARNING: Location" || true
  "$PY" -c "import hvd_herring._native" || { echo "[setup] hvd_herring build failed" >&2; exit 1; }
  echo "$src_hash" > "$STAMPS/package"
fi
say "ready: $VENV"
