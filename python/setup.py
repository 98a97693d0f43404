"""setup.py -- builds libflashc.so with the repository's Makefile and ships it inside the package.

    pip install ./python                     # builds the C library (make), copies it into flashc/
    FLASHC_LIBRARY=/path/libflashc.so pip install ./python   # ship a library built elsewhere

The C build goes to python/build/c (not the repository's build/, which `make` owns), with the CUDA
backend when nvcc is found, as `make` decides. Everything else is in pyproject.toml.
"""
import os
import shutil
import subprocess
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def build_library():
    given = os.environ.get("FLASHC_LIBRARY")
    if given:
        if not Path(given).is_file():
            raise RuntimeError(f"FLASHC_LIBRARY={given} is not a file")
        return Path(given)
    if not (REPO / "Makefile").is_file():
        raise RuntimeError(f"no Makefile at {REPO}: build python/ from a flashc checkout, or set FLASHC_LIBRARY")
    out = HERE / "build" / "c"
    jobs = os.environ.get("FLASHC_MAKE_JOBS", "2")
    subprocess.run(["make", "-C", str(REPO), f"BUILD={out}", f"-j{jobs}", "lib"], check=True)
    return out / "libflashc.so"


class BuildPyWithLibrary(build_py):
    def run(self):
        super().run()
        target = Path(self.build_lib) / "flashc" / "libflashc.so"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(build_library(), target)


class BinaryDistribution(Distribution):
    """The wheel carries a native library: tag it for this platform, not py3-none-any."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildPyWithLibrary}, distclass=BinaryDistribution)
