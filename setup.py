"""Builds hvd_herring: the native core with CMake (CMakeLists.txt), the Python package, and the
one-line .pth file that makes HOROVOD_BACKEND=herring take effect in every interpreter."""

import os
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))
PTH = "hvd_herring_switch.pth"
TF_OPS = "libherring_tensorflow.so"  # built only when TensorFlow is importable


def install_file(src, dest):
    """Copies atomically: processes that have the old library loaded keep their mapping, instead of
    seeing its bytes change under them (a rebuild during a running job must not crash it)."""
    tmp = dest + ".tmp"
    shutil.copyfile(src, tmp)
    os.replace(tmp, dest)


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    """Configures and builds with CMake in build/cmake (kept between builds: incremental), then
    copies the module into the package, in the wheel and in the source tree alike."""

    def build_extension(self, ext):
        build_dir = os.environ.get("HERRING_CMAKE_BUILD_DIR", os.path.join(ROOT, "build", "cmake"))
        os.makedirs(build_dir, exist_ok=True)
        cfg = ["-DPython3_EXECUTABLE=" + sys.executable, "-DCMAKE_BUILD_TYPE=Release"]
        if os.environ.get("HERRING_SANITIZE") == "1":
            cfg.append("-DHERRING_SANITIZE=ON")
        for knob in ("HERRING_TENSORFLOW", "HERRING_TORCH", "HERRING_NATIVE_TESTS"):  # AUTO (default), ON or OFF
            if os.environ.get(knob):
                cfg.append(f"-D{knob}={os.environ[knob]}")
        subprocess.check_call(["cmake", ROOT] + cfg, cwd=build_dir)
        # The TensorFlow op library and the torch calls exist only where CMake found their framework.
        with open(os.path.join(build_dir, "CMakeCache.txt")) as f:
            cache = f.read()
        with_tf = "HERRING_TENSORFLOW_OPS_BUILT:INTERNAL=ON" in cache
        with_torch = "HERRING_TORCH_CALLS_BUILT:INTERNAL=ON" in cache
        with_tests = "HERRING_NATIVE_TESTS_BUILT:INTERNAL=ON" in cache  # GTest found (or not wanted)
        targets = (["_native"] + (["herring_native_tests"] if with_tests else [])
                   + (["herring_tensorflow"] if with_tf else []) + (["_torch_native"] if with_torch else []))
        jobs = str(os.cpu_count() or 2)
        subprocess.check_call(["cmake", "--build", ".", "--target", *targets, "-j", jobs], cwd=build_dir)
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        package_dirs = {os.path.dirname(os.path.abspath(dest)), os.path.join(ROOT, "hvd_herring")}
        for built in ("_native" + suffix, "libherring_core.so"):
            for d in package_dirs:
                install_file(os.path.join(build_dir, built), os.path.join(d, built))
        for built, wanted in ((TF_OPS, with_tf), ("_torch_native" + suffix, with_torch)):
            for d in package_dirs:
                installed = os.path.join(d, built)
                if wanted:
                    install_file(os.path.join(build_dir, built), installed)
                elif os.path.exists(installed):
                    os.remove(installed)  # stale: it would not match this core


class BuildPyWithPth(build_py):
    """Puts the .pth at the root of the wheel, i.e. in site-packages."""

    def run(self):
        super().run()
        shutil.copyfile(os.path.join(ROOT, PTH), os.path.join(self.build_lib, PTH))


setup(
    name="hvd-herring",
    version="0.1.0",
    description="A Horovod-compatible backend with a Herring-style parameter-server reduction engine",
    packages=find_packages(include=["hvd_herring", "hvd_herring.*"]),
    ext_modules=[CMakeExtension("hvd_herring._native")],
    cmdclass={"build_ext": CMakeBuild, "build_py": BuildPyWithPth},
    python_requires=">=3.9",
    # The engine itself needs nothing from PyPI; each front needs its framework, pinned to the
    # version the native calls are built against (requirements/base.txt pins the same). Horovod is
    # only for its API and horovodrun: torch.distributed ("herring") and torchft need none of it.
    # Build Horovod without frameworks: HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_TENSORFLOW=1
    # HOROVOD_WITHOUT_MXNET=1 pip install 'hvd-herring[horovod]'.
    extras_require={
        "torch": ["torch==2.13.0"],
        "tensorflow": ["tensorflow-cpu==2.21.0"],
        "keras2": ["tensorflow-cpu==2.21.0", "tf_keras==2.21.0"],
        "horovod": ["horovod==0.28.1"],
        "spark": ["horovod==0.28.1", "pyspark==4.3.0", "pyarrow==26.0.1", "pandas==3.1.1"],
        "ray": ["horovod==0.28.1", "ray[train]==2.60.0"],
    },
    zip_safe=False,
)
