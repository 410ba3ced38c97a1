"""setup.py — builds asgdsim._core through the project's CMake (pyproject.toml has the rest).

Only the `asgdsim_core` target and what it links (the simulator's static libraries), in
Release on the OMP backend, compiled through the project's shared compiler cache
(ASGD_CCACHE: a build after any other on this machine is mostly cache hits), in a build
folder that stays between installs: $ASGDSIM_BUILD_DIR, default build-python/ in this
tree. A folder already configured (ASGDSIM_BUILD_DIR=build: what ./scripts/run.sh built)
is built as it is, not reconfigured. Parallel jobs: $ASGD_JOBS (default 2), niced.
"""
import os
import re
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


def version():
    """The project's version, as CMakeLists.txt declares it (one place)."""
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        return re.search(r"project\(asgdsim VERSION ([0-9.]+)", f.read()).group(1)


def base_python():
    """The interpreter the extension is built for: a venv's base (/usr/bin/python3 for a
    venv made by it), which outlives the venv that the build folder may be reused after."""
    return getattr(sys, "_base_executable", None) or sys.executable


class CMakeBuild(build_ext):
    """build_ext for the one extension: CMake builds it, this copies it where setuptools
    wants it (the wheel's tree, or python/asgdsim for an editable install)."""

    def build_extension(self, ext):
        build = os.path.abspath(os.environ.get("ASGDSIM_BUILD_DIR") or os.path.join(ROOT, "build-python"))
        nice = ["nice", "-n", "10"] if shutil.which("nice") else []
        if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
            generator = ["-G", "Ninja"] if shutil.which("ninja") else []
            subprocess.check_call(["cmake", "-S", ROOT, "-B", build, *generator, "-DCMAKE_BUILD_TYPE=Release",
                                   "-DASGD_BACKEND=OMP", "-DASGD_CCACHE=ON", "-DASGD_BUILD_TESTS=OFF",
                                   "-DASGD_PYTHON=ON", f"-DASGD_PYTHON_INTERPRETER={base_python()}"])
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            if "ASGD_PYTHON:BOOL=ON" not in f.read().split("\n"):
                sys.exit(f"setup.py: {build} was configured without the Python package (ASGD_PYTHON OFF: the CUDA "
                         "backend, a sanitizer build, or no pybind11-dev/python3-dev); set ASGDSIM_BUILD_DIR to "
                         "a new folder")
        jobs = os.environ.get("ASGD_JOBS", "2")
        subprocess.check_call([*nice, "cmake", "--build", build, "--target", "asgdsim_core", "-j", jobs])
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        built = os.path.join(build, "python", "asgdsim", "_core" + suffix)
        if not os.path.exists(built):
            found = sorted(f for f in os.listdir(os.path.dirname(built)) if f.startswith("_core"))
            sys.exit(f"setup.py: {build} built {', '.join(found) or 'no _core'}, not _core{suffix} for "
                     f"{sys.executable}: that folder was configured for another interpreter; "
                     "set ASGDSIM_BUILD_DIR to a new folder")
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(built, target)


setup(version=version(), ext_modules=[Extension("asgdsim._core", sources=[])], cmdclass={"build_ext": CMakeBuild},
      options={"build": {"build_base": os.path.join("build-python", "setuptools")}})
