"""Builds hvd_herring: the native core with CMake (CMakeLists.txt), the Python package, and the
one-line .pth file that makes HOROVOD_BACKEND=herring take effect in every interpreter."""

import os
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))
PTH = "hvd_herring_switch.pth"


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
        subprocess.check_call(["cmake", ROOT] + cfg, cwd=build_dir)
        jobs = str(os.cpu_count() or 2)
        subprocess.check_call(["cmake", "--build", ".", "--target", "_native", "herring_native_tests",
                               "-j", jobs], cwd=build_dir)
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        package_dirs = {os.path.dirname(os.path.abspath(dest)), os.path.join(ROOT, "hvd_herring")}
        for built in ("_native" + suffix, "libherring_core.so"):
            for d in package_dirs:
                shutil.copyfile(os.path.join(build_dir, built), os.path.join(d, built))


class BuildPyWithPth(build_py):
    """Puts the .pth at the root of the wheel, i.e. in site-packages."""

    def run(self):
        super().run()
        shutil.copyfile(os.path.join(ROOT, PTH), os.path.join(self.build_lib, PTH))


setup(
    name="hvd-herring",
    version="0.1.0",
    description="A Horovod-compatible backend with a Herring-style parameter-server reduction engine",
    packages=["hvd_herring", "hvd_herring.torch"],
    ext_modules=[CMakeExtension("hvd_herring._native")],
    cmdclass={"build_ext": CMakeBuild, "build_py": BuildPyWithPth},
    python_requires=">=3.9",
    zip_safe=False,
)
