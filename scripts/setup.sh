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
[ -x /usr/sbin/sshd ] || need_apt+=(openssh-server)     # the simulated cluster: an sshd per host
command -v ssh >/dev/null 2>&1 || need_apt+=(openssh-client)
command -v iperf3 >/dev/null 2>&1 || need_apt+=(iperf3)   # its link bound
# Libraries the core builds on (crypto, JSON, HTTP) and its unit-test framework.
command -v pkg-config >/dev/null 2>&1 || need_apt+=(pkg-config)   # finds cpp-httplib's build flags
for pkg in libssl-dev nlohmann-json3-dev libcpp-httplib-dev libgtest-dev; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
# clang with libFuzzer's runtime: the wire decoders' fuzz target (fuzz/, tests/native/test_security.py).
command -v clang++-14 >/dev/null 2>&1 || need_apt+=(clang-14)
dpkg -s libclang-rt-14-dev >/dev/null 2>&1 || need_apt+=(libclang-rt-14-dev)
# Java 17 for Spark 4 (pyspark starts its JVMs with it): tests/cluster_engines/applications/test_spark.py, docs/spark.md.
command -v java >/dev/null 2>&1 || need_apt+=(openjdk-17-jre-headless)
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
# pip, minus the noise this machine's index configuration prints; fails when pip fails.
pip_quiet() {
  local log status
  log=$(mktemp)
  set +e
  "$PY" -m pip "$@" >"$log" 2>&1
  status=$?
  set -e
  grep -v "^WARNING: Location" "$log" || true
  rm -f "$log"
  return $status
}
req_hash=$(cat requirements/base.txt requirements/bench.txt requirements/test.txt requirements/cluster_engines.txt \
           | sha256sum | cut -d' ' -f1)
if ! stamp_ok requirements "$req_hash"; then
  say "installing requirements/base.txt, bench.txt and test.txt"
  pip_quiet install -q --upgrade pip
  pip_quiet install -q -r requirements/base.txt -r requirements/bench.txt -r requirements/test.txt
  # The cluster engines (Spark, Ray) after the frameworks, with them as constraints: nothing they
  # pull in may replace torch 2.13.0 (another torch is a download of GBs). About 5 min the first time.
  say "installing requirements/cluster_engines.txt (pyspark, ray)"
  constraints=$(mktemp)
  grep -hE '^(torch|tensorflow-cpu|numpy)==' requirements/base.txt > "$constraints"
  pip_quiet install -q -c "$constraints" -r requirements/cluster_engines.txt
  rm -f "$constraints"
  "$PY" -c "import torch, numpy, pybind11, pytest, xdist, mpi4py, matplotlib, tf_keras, mock, parameterized, pytorch_lightning, pyspark, ray.train" \
    || { echo "[setup] requirements failed" >&2; exit 1; }
  echo "$req_hash" > "$STAMPS/requirements"
fi

# 3. Horovod 0.28.1 without frameworks: horovodrun and Horovod's pure-Python layers. (Its build
#    needs the system cmake: a pip-installed cmake breaks inside its isolated build.)
if ! stamp_ok horovod "0.28.1"; then
  say "installing horovod 0.28.1 (no frameworks, about 1 minute)"
  HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 \
    pip_quiet install -q --no-cache-dir horovod==0.28.1
  "$PY" -c "import horovod, horovod.runner" || { echo "[setup] horovod failed" >&2; exit 1; }
  echo "0.28.1" > "$STAMPS/horovod"
fi

# 4. This package, rebuilt when its sources change (CMake keeps build/cmake: incremental).
src_hash=$( (echo "$req_hash"; cat setup.py pyproject.toml CMakeLists.txt hvd_herring_switch.pth scripts/setup.sh \
           $(find native hvd_herring -type f \( -name '*.cc' -o -name '*.h' -o -name '*.py' \) ! -name '_build_info.py' | sort)) \
           | sha256sum | cut -d' ' -f1)
if ! stamp_ok package "$src_hash"; then
  say "building and installing hvd_herring"
  pip_quiet install -q --no-build-isolation --no-deps .
  "$PY" -c "import hvd_herring._native" || { echo "[setup] hvd_herring build failed" >&2; exit 1; }
  echo "$src_hash" > "$STAMPS/package"
fi
say "ready: $VENV"
