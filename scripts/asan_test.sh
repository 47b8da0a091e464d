#!/usr/bin/env bash
# The native core built with AddressSanitizer + UndefinedBehaviorSanitizer, beside the normal one:
# its own CMake tree (build/asan) and its own copy of the package (build/asan/pkg/hvd_herring), so
# .venv's normal build is never touched. A process runs on it with
#   PYTHONPATH=build/asan/pkg  LD_PRELOAD=<libasan.so>   (Python itself is not instrumented)
#
#   bash scripts/asan_test.sh          build, then run tests/native/sanitizers/test_sanitizers.py against it
#   bash scripts/asan_test.sh build    only build; prints the package directory on its last line
#
# Compiled at -O0 with frame pointers and assertions on: the reduction kernels' template
# instantiations take minutes to optimise under the sanitizers (-O1: over 75 s of CPU for
# native/kernels/reduce.cc alone, -O0: 13 s), and the sanitized tests are about correctness, not
# speed. The TensorFlow ops are not part of it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$ROOT/build/asan"
PKG="$BUILD/pkg"
PY="$ROOT/.venv/bin/python"
say() { echo "[asan] $*" >&2; }

[ -x "$PY" ] || bash "$ROOT/scripts/setup.sh" >&2

build() {
  mkdir -p "$BUILD"
  local start=$SECONDS
  # Configured every time (seconds): a changed option here reaches an existing tree.
  cmake -S "$ROOT" -B "$BUILD" -DPython3_EXECUTABLE="$PY" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O0 -g" -DHERRING_SANITIZE=ON -DHERRING_TENSORFLOW=OFF \
    > "$BUILD/configure.log" 2>&1 || { cat "$BUILD/configure.log" >&2; exit 1; }
  # The torch calls (native/torch) too, where torch is importable: the checks that interrupt a
  # synchronous call mid-flight run through them.
  local targets=(_native herring_native_tests)
  grep -q "HERRING_TORCH_CALLS_BUILT:INTERNAL=ON" "$BUILD/CMakeCache.txt" && targets+=(_torch_native)
  if ! cmake --build "$BUILD" --target "${targets[@]}" -j "$(nproc)" > "$BUILD/build.log" 2>&1; then
    tail -60 "$BUILD/build.log" >&2
    exit 1
  fi
  # The package: the Python sources of the tree, the sanitized libraries beside them.
  rm -rf "$PKG.tmp"
  mkdir -p "$PKG.tmp"
  cp -r "$ROOT/hvd_herring" "$PKG.tmp/"
  find "$PKG.tmp" \( -name '*.so' -o -name '__pycache__' \) -prune -exec rm -rf {} +
  cp "$BUILD"/_native*.so "$BUILD/libherring_core.so" "$PKG.tmp/hvd_herring/"
  if [[ " ${targets[*]} " == *" _torch_native "* ]]; then cp "$BUILD"/_torch_native*.so "$PKG.tmp/hvd_herring/"; fi
  rm -rf "$PKG"
  mv "$PKG.tmp" "$PKG"
  say "sanitized core built in $((SECONDS - start)) s: $PKG"
  echo "$PKG"
}

case "${1:-test}" in
  build) build ;;
  test)
    build >/dev/null
    cd "$ROOT"
    exec "$ROOT/.venv/bin/pytest" tests/native/sanitizers/test_sanitizers.py "${@:2}"
    ;;
  *) echo "usage: $0 [build|test [pytest args]]" >&2; exit 2 ;;
esac
