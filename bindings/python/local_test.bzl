"""dk_py_local_test: a test of the distkit package in one process (no
distrun, no ranks), as most of this package's tests without "multirank" in
their names are."""

def dk_py_local_test(name, deps = [], size = "small", **kwargs):
    """py_test of tests/<name>.py with //bindings/python:distkit.

    Args:
      name: the test's name, and its program's under tests/.
      deps: the program's other imports.
      size: Bazel's size ("small" unless given).
      **kwargs: py_test's other arguments (args, data, env, ...).
    """
    native.py_test(
        name = name,
        size = size,
        srcs = ["tests/%s.py" % name],
        python_version = "PY3",
        deps = ["//bindings/python:distkit"] + deps,
        **kwargs
    )
