#!/usr/bin/env bash
# Sets up the DeepSpeed peer of the single-host benchmarks, idempotently: installs the pinned
# `deepspeed` package (requirements/peer_deepspeed.txt) into the project's .venv, with every pin of
# the project's requirements as a constraint (torch stays 2.13.0: another torch is a download of
# GBs), and builds its shared-memory allreduce op (deepspeed_shm_comm, csrc/cpu/comm/shm.cpp and
# shm_interface.cpp) once, through DeepSpeed's own ShareMemCommBuilder on the CPU accelerator, into
# a torch-extensions cache outside the tracked files (default .cache/deepspeed/torch_extensions;
# HERRING_BENCH_CACHE moves it). The build log stays in .cache/deepspeed/build.log. Prints the
# extensions directory on its last line. The second run checks the stamp and the built op (a second).
#
# Why the project's .venv and not an environment of its own (as Horovod-with-PyTorch has): DeepSpeed
# needs no patched build of anything, runs on the very torch 2.13.0 herring and torch-gloo run on
# (one interpreter for every torch stack, and no second torch install), and its Python package
# does nothing until a worker imports it. Why a peer set-up and not scripts/setup.sh: hvd_herring
# does not need DeepSpeed; only the benchmark peer and its test do, and the op is a compiled build
# (about a minute on 2 cores). scripts/test.sh runs this script, so the peer's test runs in CI.
#
# No oneCCL: DeepSpeed's CPU accelerator uses the gloo backend when oneccl_bindings_for_pytorch is
# absent, and its shm op needs only a process group for set-up plus LOCAL_SIZE == world size.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY="$ROOT/.venv/bin/python"
REQ="$ROOT/requirements/peer_deepspeed.txt"
CACHE="${HERRING_BENCH_CACHE:-$ROOT/.cache}/deepspeed"
EXT="$CACHE/torch_extensions"
STAMP="$CACHE/stamp"
LOG="$CACHE/build.log"
# Bump RECIPE when the steps below change: the stamp then no longer matches and it redoes them.
RECIPE=1
DS_VERSION="$(grep -E '^deepspeed==' "$REQ" | cut -d= -f3)"
TORCH_VERSION="$(grep -E '^torch==' "$ROOT/requirements/base.txt" | cut -d= -f3)"
REQ_HASH="$(sha256sum "$REQ" | cut -c1-16)"
STAMP_WANT="recipe=$RECIPE deepspeed=$DS_VERSION torch=$TORCH_VERSION requirements=$REQ_HASH"
say() { echo "[deepspeed-peer] $*" >&2; }

[ -x "$PY" ] || { say "no $PY: run bash scripts/setup.sh first"; exit 1; }
export DS_ACCELERATOR=cpu TORCH_EXTENSIONS_DIR="$EXT"

load_op() {
  # What deepspeed.comm's TorchBackend does at init (build_shm_op): the CPU accelerator's
  # ShareMemCommBuilder, loaded (built the first time) into TORCH_EXTENSIONS_DIR. Then the ISA
  # level its kernels need: fp32 needs 1 (AVX2), bf16/fp16 need 2 (AVX-512BW).
  "$PY" - "$@" <<'PYEOF'
import sys
import torch
from deepspeed.accelerator import get_accelerator
accel = get_accelerator()
assert accel.device_name() == "cpu", f"DeepSpeed chose the {accel.device_name()!r} accelerator"
builder = accel.create_op_builder("ShareMemCommBuilder")
assert builder is not None, "the CPU accelerator has no ShareMemCommBuilder"
op = builder.load(verbose="-v" in sys.argv[1:])
level = op.vector_kernel_level()
assert level >= 1, f"vector_kernel_level() is {level}: the fp32 kernel needs AVX2"
assert hasattr(torch.ops.deepspeed, "inference_all_reduce_")
print(f"op {op.__file__} vector_kernel_level={level} torch={torch.__version__}")
PYEOF
}

# The second run: the stamp and the built library (scripts/test.sh runs this before every test
# run, so it must not import torch when nothing changed).
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$STAMP_WANT" ] \
    && [ -n "$(find "$EXT" -name 'deepspeed_shm_comm*.so' 2>/dev/null | head -1)" ] \
    && [ "$("$PY" -c "from importlib import metadata; print(metadata.version('deepspeed'))" 2>/dev/null)" = "$DS_VERSION" ]; then
  echo "$EXT"
  exit 0
fi
command -v g++ >/dev/null 2>&1 || { say "g++ is needed (apt-get install g++)"; exit 1; }
mkdir -p "$CACHE"
rm -f "$STAMP"

# Every exact pin of the project's requirements constrains the install.
constraints="$(mktemp)"
trap 'rm -f "$constraints"' EXIT
grep -hE '^[A-Za-z0-9_.-]+==' "$ROOT"/requirements/{base,bench,test,cluster_engines}.txt > "$constraints"
say "installing deepspeed==$DS_VERSION into .venv (pure Python: DS_BUILD_OPS=0, ops are built below)"
# --no-build-isolation: DeepSpeed's setup.py imports torch to find the accelerator; an isolated
# build would not see torch 2.13.0 (and must not fetch another).
if ! DS_BUILD_OPS=0 "$PY" -m pip install -q --no-build-isolation -c "$constraints" -r "$REQ" >"$LOG" 2>&1; then
  grep -v "^WARNING: Location" "$LOG" | tail -30 >&2
  say "pip install failed; full log: $LOG"
  exit 1
fi
"$PY" -c "import torch; assert torch.__version__.startswith('$TORCH_VERSION'), torch.__version__" \
  || { say "torch is no longer $TORCH_VERSION"; exit 1; }

say "building the deepspeed_shm_comm op into $EXT (about a minute on 2 cores)"
start=$(date +%s)
if ! load_op -v >>"$LOG" 2>&1; then
  tail -30 "$LOG" >&2
  say "building the op failed; full log: $LOG"
  exit 1
fi
say "built in $(( $(date +%s) - start )) s: $(tail -1 "$LOG")"
echo "$STAMP_WANT" > "$STAMP"
echo "$EXT"
