"""dk_py_multirank_test: a multi-rank test of a Python program that imports
the distkit package, as most of this package's tests are."""

load("//testing:multirank.bzl", "BINDING_WORLD_SIZES", "dk_multirank_test")

RANK_CHECK = "//testing/python:rank_check"

# A binding's world sizes with peers, for tests of what ranks do together.
PEER_WORLD_SIZES = [n for n in BINDING_WORLD_SIZES if n > 1]

def dk_py_multirank_test(
        name,
        srcs,
        deps = [RANK_CHECK],
        world_sizes = BINDING_WORLD_SIZES,
        **kwargs):
    """dk_multirank_test of `srcs` with //bindings/python:distkit; `deps` are
    the program's other imports (testing/python's rank_check unless given);
    the world sizes are those of a binding unless given."""
    dk_multirank_test(
        name = name,
        srcs = srcs,
        # rank_zygote: the ranks fork from one process that imported torch
        # (testing/python/zygote/rank_zygote.py).
        deps = ["//bindings/python:distkit", "//testing/python:rank_zygote"] + deps,
        world_sizes = world_sizes,
        **kwargs
    )
