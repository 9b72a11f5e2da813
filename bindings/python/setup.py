"""Builds the distkit package with libdistkit.so and the torch c10d
extension (_c10d.so: torch.distributed's "distkit" backend in C++) inside it
(see pyproject.toml): from $DISTKIT_LIBRARY and $DISTKIT_C10D_EXTENSION, or
built by Bazel in this checkout. A prebuilt library without the extension
gives a package whose "distkit" torch backend is the Python fallback."""
import os
import shutil
import subprocess

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))  # bindings/python -> the checkout


def _given(variable: str):
    given = os.environ.get(variable)
    if given and not os.path.isfile(given):
        raise SystemExit(f"{variable}={given} is not a file")
    return given


def built():
    """(libdistkit.so, _c10d.so or None)."""
    library = _given("DISTKIT_LIBRARY")
    if library:
        return library, _given("DISTKIT_C10D_EXTENSION")
    if not os.path.isfile(os.path.join(ROOT, "WORKSPACE")):
        raise SystemExit("distkit: set DISTKIT_LIBRARY to a built libdistkit.so (this source "
                         "tree is not inside a distkit checkout, so Bazel cannot build it)")
    subprocess.run(["tools/bootstrap.sh"], cwd=ROOT, check=True)
    subprocess.run(["bazel", "build", "//capi:libdistkit.so", "//bindings/python/c10d:_c10d.so"],
                   cwd=ROOT, check=True)
    return (os.path.join(ROOT, "bazel-bin", "capi", "libdistkit.so"),
            os.path.join(ROOT, "bazel-bin", "bindings", "python", "c10d", "_c10d.so"))


class BuildPyWithLibrary(build_py):
    """The modules, then libdistkit.so and _c10d.so beside them."""

    def run(self):
        super().run()
        library, extension = built()
        for source, name in ((library, "libdistkit.so"), (extension, "_c10d.so")):
            if source is None:
                print("distkit: no DISTKIT_C10D_EXTENSION: torch.distributed's \"distkit\" "
                      "backend will be the Python fallback")
                continue
            target = os.path.join(self.build_lib, "distkit", name)
            shutil.copyfile(source, target)
            os.chmod(target, 0o755)


class BinaryDistribution(Distribution):
    """The wheel carries a shared library: platform-specific."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildPyWithLibrary}, distclass=BinaryDistribution)
