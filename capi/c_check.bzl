"""dk_c_check_binary: an end-to-end test of the C ABI written in plain C."""

def dk_c_check_binary(name, linkopts = []):
    """The program test/<name>.c against the C ABI alone.

    It compiles as strict C11 with warnings as errors, so that the public
    header stays plain C. Run it with dk_multirank_test.

    Args:
      name: the binary's name, also the name of its source in test/.
      linkopts: what else it links (e.g. "-lm").
    """
    native.cc_binary(
        name = name,
        testonly = True,
        srcs = ["test/%s.c" % name],
        copts = [
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-pedantic",
            "-Werror",
        ],
        linkopts = linkopts,
        deps = [":capi"],
    )
