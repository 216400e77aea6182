"""pip install --no-build-isolation ./python

Builds the extension with the repository's CMake build (the folder `make build` uses, ../build,
or $KVLAB_BUILD_DIR), then installs the package with it. Offline: everything comes from Debian's
packages (python3-torch, pybind11-dev and the build's own, scripts/install-deps)."""

import glob
import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


class BuildWithCMake(build_py):
    def run(self):
        super().run()
        build_dir = os.environ.get("KVLAB_BUILD_DIR", os.path.join(REPO, "build"))
        if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
            subprocess.check_call(["cmake", "-S", REPO, "-B", build_dir, "-G", "Ninja",
                                   "-DCMAKE_BUILD_TYPE=Release"])
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "kvlab_python"])
        built = glob.glob(os.path.join(build_dir, "python", "kvlab", "_kvlab*.so"))
        if not built:
            raise RuntimeError(f"{build_dir} built no extension: does /usr/bin/python3 import "
                               "torch (apt install python3-torch pybind11-dev)?")
        target = os.path.join(self.build_lib, "kvlab")
        os.makedirs(target, exist_ok=True)
        shutil.copy2(built[0], target)


setup(
    name="kvlab",
    version="0.1.0",
    description="Attention that keeps less in the KV cache: specs, modules, kernels, decoder",
    packages=["kvlab"],
    python_requires=">=3.9",
    cmdclass={"build_py": BuildWithCMake},
)
