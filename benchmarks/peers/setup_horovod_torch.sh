#!/usr/bin/env bash
# Creates the peer environment "Horovod 0.28.1 with gloo, built with PyTorch" for the benchmarks,
# idempotently, in a cache directory outside the tracked files (default: .cache/horovod-torch at
# the repository root; override with HERRING_BENCH_CACHE). Prints the environment's python path
# on its last line. The second run only checks the stamp and that horovod.torch imports (seconds).
#
# Why a separate environment: the project's .venv holds Horovod WITHOUT frameworks (its launcher
# and Python layers, on which herring runs); the peer must be stock Horovod with its own compiled
# torch ops. Horovod 0.28.1 forces -std=c++14, while torch >= 2.1 headers need C++17, so the
# build goes through a compiler wrapper that rewrites -std=c++14 to -std=c++17 (about 5 minutes on
# 2 cores). torch is pinned to 2.13.0: its CPU wheel lies on this machine's disk, any other version
# downloads a CUDA build of several GB.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CACHE="${HERRING_BENCH_CACHE:-$ROOT/.cache}/horovod-torch"
VENV="$CACHE/venv"
PY="$VENV/bin/python"
TORCH_VERSION="2.13.0"
HOROVOD_VERSION="0.28.1"
NUMPY_VERSION="$(grep -E '^numpy==' "$ROOT/requirements/base.txt" | cut -d= -f3)"
# Bump RECIPE when the build steps below change: the stamp then no longer matches and it rebuilds.
RECIPE=1
STAMP_WANT="recipe=$RECIPE horovod=$HOROVOD_VERSION torch=$TORCH_VERSION numpy=$NUMPY_VERSION"
STAMP="$CACHE/stamp"
say() { echo "[horovod-torch] $*" >&2; }

check() {
  # A working build: horovod.torch imports its compiled ops and reports gloo built.
  "$PY" - <<'EOF' >/dev/null 2>&1
import horovod.torch as hvd
assert hvd.gloo_built(), "gloo not built"
EOF
}

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$STAMP_WANT" ] && [ -x "$PY" ] && check; then
  echo "$PY"
  exit 0
fi

command -v cmake >/dev/null 2>&1 || { echo "[horovod-torch] cmake is needed (apt-get install cmake)" >&2; exit 1; }
command -v g++ >/dev/null 2>&1 || { echo "[horovod-torch] g++ is needed (apt-get install g++)" >&2; exit 1; }

# The same base interpreter as the project's .venv when there is one.
BASE_PY="python3"
if [ -f "$ROOT/.venv/pyvenv.cfg" ]; then
  exe="$(sed -n 's/^executable = //p' "$ROOT/.venv/pyvenv.cfg")"
  [ -n "$exe" ] && [ -x "$exe" ] && BASE_PY="$exe"
fi

mkdir -p "$CACHE"
rm -f "$STAMP"
[ -x "$PY" ] || { say "creating $VENV"; "$BASE_PY" -m venv "$VENV"; }

# pip warns about every local index location that lacks a package; those lines are noise.
quiet_pip() { "$PY" -m pip "$@" 2>&1 | grep -v "^WARNING: Location" >&2 || true; }
say "installing torch==$TORCH_VERSION and build tools"
quiet_pip install -q --upgrade pip
quiet_pip install -q "torch==$TORCH_VERSION" "numpy==$NUMPY_VERSION" "setuptools>=70,<81" wheel \
  cloudpickle psutil pyyaml packaging cffi
"$PY" -c "import torch, numpy" || { echo "[horovod-torch] torch/numpy did not install" >&2; exit 1; }

# The C++17 fix: a compiler wrapper that rewrites -std=c++14 (forced by Horovod's CMake files)
# to -std=c++17 and passes everything else through.
WRAP="$CACHE/cxx17"
cat > "$WRAP" <<'EOF'
#!/usr/bin/env bash
args=()
for a in "$@"; do
  case "$a" in
    -std=c++14) args+=("-std=c++17") ;;
    -std=gnu++14) args+=("-std=gnu++17") ;;
    *) args+=("$a") ;;
  esac
done
exec g++ "${args[@]}"
EOF
chmod +x "$WRAP"

say "building horovod==$HOROVOD_VERSION with PyTorch and gloo (about 5 minutes on 2 cores)"
LOG="$CACHE/build.log"
if ! env -u HOROVOD_BACKEND CXX="$WRAP" CC=gcc \
    HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 \
    HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_CPU_OPERATIONS=gloo \
    MAKEFLAGS="-j$(nproc)" \
    "$PY" -m pip install -v --no-cache-dir --no-build-isolation "horovod==$HOROVOD_VERSION" >"$LOG" 2>&1; then
  tail -40 "$LOG" >&2
  echo "[horovod-torch] build failed; full log: $LOG" >&2
  exit 1
fi
check || { echo "[horovod-torch] horovod.torch does not import or has no gloo; see $LOG" >&2; exit 1; }
echo "$STAMP_WANT" > "$STAMP"
say "ready: $VENV"
echo "$PY"
