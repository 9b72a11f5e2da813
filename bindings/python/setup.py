"""Builds the distkit package with libdistkit.so inside it (see
pyproject.toml): from $DISTKIT_LIBRARY, or built by Bazel in this checkout."""
import os
import shutil
import subprocess

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))  # bindings/python -> the checkout


def library() -> str:
    given = os.environ.get("DISTKIT_LIBRARY")
    if given:
        if not os.path.isfile(given):
            raise SystemExit(f"DISTKIT_LIBRARY={given} is not a file")
        return given
    if not os.path.isfile(os.path.join(ROOT, "WORKSPACE")):
        raise SystemExit("distkit: set DISTKIT_LIBRARY to a built libdistkit.so (this source "
                         "tree is not inside a distkit checkout, so Bazel cannot build it)")
    subprocess.run(["tools/bootstrap.sh"], cwd=ROOT, check=True)
    subprocess.run(["bazel", "build", "//capi:libdistkit.so"], cwd=ROOT, check=True)
    return os.path.join(ROOT, "bazel-bin", "capi", "libdistkit.so")


class BuildPyWithLibrary(build_py):
    """The modules, then libdistkit.so beside them."""

    def run(self):
        super().run()
        target = os.path.join(self.build_lib, "distkit", "libdistkit.so")
        shutil.copyfile(library(), target)
        os.chmod(target, 0o755)


class BinaryDistribution(Distribution):
    """The wheel carries a shared library: platform-specific."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildPyWithLibrary}, distclass=BinaryDistribution)
