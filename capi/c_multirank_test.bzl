"""dk_c_multirank_test: an end-to-end multi-rank test of the C ABI in plain C."""

load("//testing:multirank.bzl", "dk_multirank_test")

# The transports a C test's ranks can talk over, by the suffix of its
# variant: shared memory on one host (the default), TCP alone, and two
# declared "hosts" of consecutive ranks (hierarchical groups; the program
# reads DISTKIT_TEST_HOSTS).
C_TRANSPORTS = {
    "": {},
    "_hosts": {"DISTKIT_TEST_HOSTS": "2"},
    "_tcp": {"DISTKIT_SHM": "0"},
}

def transport_variants(stem, suffixes):
    """Variants `<stem><suffix>_test` of a test, one per transport.

    Args:
      stem: the variants' names before the suffix (e.g. "shrink_c").
      suffixes: keys of C_TRANSPORTS.

    Returns:
      dk_multirank_test's `variants`.
    """
    return {
        "%s%s_test" % (stem, suffix): {"env": C_TRANSPORTS[suffix]}
        for suffix in suffixes
    }

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
            "//testing/c:declared_hosts",
            "//testing/c:elastic_model",
            "//testing/c:host_tensor",
            "//testing/c:lone_rank",
            "//testing/c:own_sockets",
            "//testing/c:rank_check",
        ],
        **kwargs
    )
