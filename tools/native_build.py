"""How the native libraries are configured with CMake, in one place for the two that configure them:
setup.py (the package's build) and scripts/setup.sh, which starts compiling the core while pip
installs the frameworks (`python tools/native_build.py core`, below). Both use one build tree,
build/cmake (HERRING_CMAKE_BUILD_DIR), kept between builds: what one compiled the other reuses.
Standard library only: it runs before anything is installed."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The parts a build may include, each AUTO (if found; CMakeLists.txt's default), ON or OFF.
KNOBS = ("HERRING_TENSORFLOW", "HERRING_TORCH", "HERRING_NATIVE_TESTS")


def build_dir():
    return os.environ.get("HERRING_CMAKE_BUILD_DIR", os.path.join(ROOT, "build", "cmake"))


def configure(python, knobs=None):
    """cmake for `python` (Release; HERRING_SANITIZE=1: with the sanitizers) in build_dir();
    knobs: {knob: value}, by default those set in the environment. Returns the CMake cache's text."""
    knobs = {k: os.environ[k] for k in KNOBS if os.environ.get(k)} if knobs is None else knobs
    cfg = ["-DPython3_EXECUTABLE=" + python, "-DCMAKE_BUILD_TYPE=Release"]
    if os.environ.get("HERRING_SANITIZE") == "1":
        cfg.append("-DHERRING_SANITIZE=ON")
    cfg += [f"-D{k}={v}" for k, v in knobs.items()]
    os.makedirs(build_dir(), exist_ok=True)
    subprocess.check_call(["cmake", ROOT] + cfg, cwd=build_dir())
    with open(os.path.join(build_dir(), "CMakeCache.txt")) as f:
        return f.read()


def build(targets):
    jobs = str(os.cpu_count() or 2)
    subprocess.check_call(["cmake", "--build", ".", "--target", *targets, "-j", jobs], cwd=build_dir())


def build_core(python):
    """The core and its Python module, without the framework parts and the tests: what needs no
    framework installed. Their objects do not depend on those knobs, so the package's build, which
    configures the tree again with its own, compiles only the framework parts and the tests."""
    configure(python, {k: "OFF" for k in KNOBS})
    build(["_native"])


if __name__ == "__main__":
    if sys.argv[1:] != ["core"]:
        sys.exit("usage: python tools/native_build.py core")
    build_core(sys.executable)
