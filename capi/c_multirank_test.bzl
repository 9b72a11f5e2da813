"""dk_c_multirank_test: an end-to-end multi-rank test of the C ABI in plain C."""

load("//testing:multirank.bzl", "dk_multirank_test")

def dk_c_multirank_test(name, linkopts = [], **kwargs):
    """The program test/<stem>_multirank_test.c against the C ABI alone.

    <stem> is `name` without its "_test" / "_tests" ending. The program
    compiles as strict C11 with warnings as errors, so that the public header
    stays plain C, and runs through dk_multirank_test (which takes the rest of
    the arguments: world_sizes, timeout_s, variants, ...).

    Args:
      name: the test's (or, with variants, the suite's) name.
      linkopts: what else the program links (e.g. "-lm").
      **kwargs: dk_multirank_test's arguments.
    """
    stem = name
    for ending in ["_tests", "_test"]:
        if stem.endswith(ending):
            stem = stem[:-len(ending)]
            break
    dk_multirank_test(
        name = name,
        srcs = ["test/%s_multirank_test.c" % stem],
        copts = [
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-pedantic",
            "-Werror",
        ],
        linkopts = linkopts,
        deps = [
            ":capi",
            "//testing/c:elastic_model",
            "//testing/c:host_tensor",
        ],
        **kwargs
    )
