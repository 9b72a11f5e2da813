"""py_binary with this workspace's defaults: Python 3, its one source its main.

    load("//tools/build_defs:py.bzl", "dk_py_binary")

    dk_py_binary(name = "bench", data = [...])            # bench.py
    dk_py_binary(name = "rank_py", src = "rank.py", testonly = True)
"""

def dk_py_binary(name, src = None, **kwargs):
    """A py_binary of the one file `src` (default: <name>.py)."""
    src = src or name + ".py"
    native.py_binary(
        name = name,
        srcs = [src],
        main = src,
        python_version = "PY3",
        **kwargs
    )
