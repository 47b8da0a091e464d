#!/usr/bin/env bash
# Sets up what hvd_herring needs, idempotently, in .venv at the repository root:
#   bash scripts/setup.sh          the full set-up (what scripts/test.sh, CI and the benchmarks run):
#                                  system packages (Open MPI, GTest, clang, Java...), the pinned
#                                  Python packages (requirements/*.txt), Horovod 0.28.1 (without
#                                  frameworks: its launcher and Python layers), and this package
#                                  built from source with the TensorFlow ops and the native tests
#   bash scripts/setup.sh --demo   what scripts/demo.sh needs and nothing more: torch, numpy and the
#                                  build's packages (from requirements/base.txt), Horovod, and the
#                                  core with its torch calls (no TensorFlow, no native tests)
# Fast the second time: each step has a stamp in .venv/.herring-stamps naming the profile that made
# it. --demo accepts the full profile's stamps (it never downgrades a full set-up); a plain run on
# top of --demo installs the rest and rebuilds the package with the full options (CMake keeps
# build/cmake: only the TensorFlow ops and the tests are compiled then).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="$ROOT/.venv"
STAMPS="$VENV/.herring-stamps"
PY="$VENV/bin/python"
say() { echo "[setup] $*"; }
PROFILE=full
case "${1:-}" in
  --demo) PROFILE=demo ;;
  "") ;;
  *) echo "usage: bash scripts/setup.sh [--demo]" >&2; exit 2 ;;
esac
# The demo profile's Python packages: these names' pins in requirements/base.txt.
DEMO_PACKAGES="torch numpy pybind11 setuptools wheel"
# The package's build options per profile (setup.py passes them to CMake, CMakeLists.txt).
build_options() {
  case "$1" in
    demo) echo HERRING_TORCH=ON HERRING_TENSORFLOW=OFF HERRING_NATIVE_TESTS=OFF ;;
    full) echo HERRING_TORCH=ON HERRING_TENSORFLOW=ON HERRING_NATIVE_TESTS=ON ;;
  esac
}

# 1. System packages: a C++ compiler, CMake and the libraries the core builds on (crypto, JSON,
#    HTTP); the full profile adds what the tests and other launch paths use.
need_apt=()
command -v cmake >/dev/null 2>&1 || need_apt+=(cmake)
command -v g++ >/dev/null 2>&1 || need_apt+=(g++)
command -v pkg-config >/dev/null 2>&1 || need_apt+=(pkg-config)   # finds cpp-httplib's build flags
for pkg in libssl-dev nlohmann-json3-dev libcpp-httplib-dev; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if [ "$PROFILE" = full ]; then
  command -v mpirun >/dev/null 2>&1 || need_apt+=(openmpi-bin libopenmpi-dev)   # the MPI launch path
  [ -x /usr/sbin/sshd ] || need_apt+=(openssh-server)     # the simulated cluster: an sshd per host
  command -v ssh >/dev/null 2>&1 || need_apt+=(openssh-client)
  command -v iperf3 >/dev/null 2>&1 || need_apt+=(iperf3)   # its link bound
  dpkg -s libgtest-dev >/dev/null 2>&1 || need_apt+=(libgtest-dev)   # the native unit tests
  # clang with libFuzzer's runtime: the wire decoders' fuzz target (fuzz/, tests/native/test_security.py).
  command -v clang++-14 >/dev/null 2>&1 || need_apt+=(clang-14)
  dpkg -s libclang-rt-14-dev >/dev/null 2>&1 || need_apt+=(libclang-rt-14-dev)
  # Java 17 for Spark 4 (pyspark starts its JVMs with it): tests/cluster_engines/applications/test_spark.py, docs/spark.md.
  command -v java >/dev/null 2>&1 || need_apt+=(openjdk-17-jre-headless)
fi
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
# The requirements stamp: "full <hash of every requirements file>" or "demo <hash of its pins>".
full_req="full $(cat requirements/base.txt requirements/bench.txt requirements/test.txt \
                    requirements/cluster_engines.txt | sha256sum | cut -d' ' -f1)"
demo_pins=$(grep -E "^($(tr ' ' '|' <<<"$DEMO_PACKAGES"))([<>=!~ ;]|$)" requirements/base.txt)
demo_req="demo $(sha256sum <<<"$demo_pins" | cut -d' ' -f1)"
have_req=$(cat "$STAMPS/requirements" 2>/dev/null || true)
# A stamp from before the profiles (the hash alone) is the full profile's.
if [ "$have_req" = "${full_req#full }" ]; then have_req="$full_req"; echo "$full_req" > "$STAMPS/requirements"; fi
if [ "$have_req" != "$full_req" ] && { [ "$PROFILE" = full ] || [ "$have_req" != "$demo_req" ]; }; then
  # The core needs no framework: it compiles (CMake, both cores) while pip installs them (mostly one
  # core), and step 4 then compiles only the framework parts. CMake needs pybind11 to configure.
  pip_quiet install -q "$(grep -E '^pybind11([<>=!~ ;]|$)' requirements/base.txt)"
  core_log="$STAMPS/core-build.log"
  say "compiling the core meanwhile (log: $core_log)"
  # In a session of its own (setsid: its pid is its process group's id), so that a failed or
  # interrupted set-up ends the whole build (cmake, make, the compilers), not only the script.
  setsid "$PY" tools/native_build.py core >"$core_log" 2>&1 &
  core_build=$!
  trap 'kill -- -"$core_build" 2>/dev/null || true' EXIT
  if [ "$PROFILE" = demo ]; then
    say "installing the demo's packages from requirements/base.txt: $DEMO_PACKAGES"
    pins=$(mktemp)
    echo "$demo_pins" > "$pins"
    pip_quiet install -q -r "$pins"
    rm -f "$pins"
    "$PY" -c "import torch, numpy, pybind11" || { echo "[setup] requirements failed" >&2; exit 1; }
    echo "$demo_req" > "$STAMPS/requirements"
  else
    pip_quiet install -q --upgrade pip   # not for the demo: .venv's own pip serves it (a minute less on a busy machine)
    say "installing requirements/base.txt, bench.txt and test.txt"
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
    echo "$full_req" > "$STAMPS/requirements"
  fi
fi
# The profile this .venv holds from here on: the package is built with its options.
read -r venv_profile _ < "$STAMPS/requirements"

# 3. Horovod 0.28.1 without frameworks: horovodrun and Horovod's pure-Python layers. Without a
#    framework it installs no compiled code, so nothing is compiled: no Gloo or MPI controller
#    (they live in the frameworks' extensions) and no CUDA probe (a CMake toolchain file says there is
#    no CUDA compiler: probing nvcc took over a minute on a busy machine). Its sdist comes through
#    pip's HTTP cache; the wheel built from it is not cached (--no-cache-dir), so that a Horovod wheel
#    cached by another build (one with PyTorch, benchmarks/peers) is never taken instead. The build
#    uses .venv's setuptools and the system cmake (a pip-installed cmake breaks in an isolated build).
if ! stamp_ok horovod "0.28.1"; then
  say "installing horovod 0.28.1 (no frameworks: nothing to compile)"
  hvd_tmp=$(mktemp -d)
  printf 'set(CMAKE_CUDA_COMPILER "")\nset(CMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit TRUE)\n' > "$hvd_tmp/no-cuda.cmake"
  pip_quiet download -q --no-deps --no-build-isolation -d "$hvd_tmp" horovod==0.28.1
  HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_WITHOUT_GLOO=1 \
    HOROVOD_WITHOUT_MPI=1 CMAKE_TOOLCHAIN_FILE="$hvd_tmp/no-cuda.cmake" \
    pip_quiet install -q --no-cache-dir --no-build-isolation "$hvd_tmp"/horovod-0.28.1.tar.gz
  rm -rf "$hvd_tmp"
  "$PY" -c "import horovod, horovod.runner" || { echo "[setup] horovod failed" >&2; exit 1; }
  echo "0.28.1" > "$STAMPS/horovod"
fi

if [ -n "${core_build:-}" ]; then
  wait "$core_build" || { tail -40 "$core_log" >&2; echo "[setup] compiling the core failed (log: $core_log)" >&2; exit 1; }
  trap - EXIT
fi

# 4. This package, rebuilt when its sources, the packages it builds against or the profile change
#    (CMake keeps build/cmake: incremental). The stamp: "<profile> <hash>".
src_hash=$( (cat "$STAMPS/requirements"; cat setup.py tools/native_build.py pyproject.toml CMakeLists.txt hvd_herring_switch.pth scripts/setup.sh \
           $(find native hvd_herring -type f \( -name '*.cc' -o -name '*.h' -o -name '*.py' \) ! -name '_build_info.py' | sort)) \
           | sha256sum | cut -d' ' -f1)
if ! stamp_ok package "$venv_profile $src_hash"; then
  say "building and installing hvd_herring ($venv_profile: $(build_options "$venv_profile"))"
  ( export $(build_options "$venv_profile"); pip_quiet install -q --no-build-isolation --no-deps . )
  "$PY" -c "import hvd_herring._native" || { echo "[setup] hvd_herring build failed" >&2; exit 1; }
  echo "$venv_profile $src_hash" > "$STAMPS/package"
fi
say "ready ($venv_profile): $VENV"
