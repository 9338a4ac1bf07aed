"""The package build (pyproject.toml has the rest): the native slice reader compiled into the wheel.

Where a C compiler and librdkafka's header are (Debian: `apt-get install gcc librdkafka-dev`),
building the wheel, or installing from the sdist, also compiles matos_dagster/core/archive/native
(build.py) into it, and the wheel is then tagged for this platform. Where they are not, the build
says why in one line and goes on: the wheel holds the source alone, the archive uses the Python
reader, and `python -m matos_dagster.core.archive.native.build` builds the native one later. An
editable install (`make install`) builds it in the source tree instead (the Makefile's target).
"""

import importlib.util
import sys
import sysconfig
from pathlib import Path

from setuptools import setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_py import build_py

NATIVE = Path("matos_dagster", "core", "archive", "native")


def native_build():
    """native/build.py by its path: the package itself imports what the build has not installed."""
    spec = importlib.util.spec_from_file_location("native_build", Path(__file__).parent / NATIVE / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildPy(build_py):
    def run(self):
        super().run()
        if self.editable_mode:
            return
        target = Path(self.build_lib) / NATIVE / "_slice_reader.so"
        why = native_build().build(target)
        if why is None:
            self.distribution.native_reader = True
        else:
            print(f"matos-dagster: native slice reader not built ({why.splitlines()[0]}); the archive uses the "
                  "Python reader: `python -m matos_dagster.core.archive.native.build` builds it later", file=sys.stderr)


class BdistWheel(bdist_wheel):
    def get_tag(self):
        python, abi, plat = super().get_tag()
        if getattr(self.distribution, "native_reader", False):  # a shared library of this platform's
            return "py3", "none", sysconfig.get_platform().replace("-", "_").replace(".", "_")
        return python, abi, plat


setup(cmdclass={"build_py": BuildPy, "bdist_wheel": BdistWheel})
