"""dk_multirank_test: one Bazel test target per world size, each running real
processes through distrun (the same machinery users launch jobs with).

Load it from a BUILD file, also in a workspace that vendors distkit as
@distkit:

    load("@distkit//testing:multirank.bzl", "dk_multirank_test")

    dk_multirank_test(
        name = "allreduce_test",
        binary = ":allreduce_check",   # any executable: cc_binary, py_binary, ...
        args = ["--size", "1024"],
        world_sizes = [1, 2, 3, 4],    # -> allreduce_test_ws1 ... _ws4
        timeout_s = 120,               # distrun stops every rank after this
    )

This defines `allreduce_test_ws1` ... `allreduce_test_ws4` and a test_suite
`allreduce_test` holding them. Each rank sees torchrun's variables (RANK,
WORLD_SIZE, ...) plus DISTKIT_STORE and DISTKIT_TOKEN; a failing rank stops the
others and fails the test with its exit code; the time bound fails it with 124.

For a job whose ranks run different programs (e.g. one per language), pass
`binaries = [a, b, c]` instead of `binary`: rank i runs binaries[i] and the
world size is len(binaries). `rank_args` then gives each program's arguments.
"""

# World sizes for a program that reaches the library through a binding (the
# Python package): the binding passes each call through, so what differs by
# size is only what it can see, 1 (no peers), 2 (an even split) and 3 (an
# uneven one, bystanders); 4 is 2's case again with two ranks per core. The
# library's own paths at 4 are tested in C++ (cc/group, cc/parallel, capi).
BINDING_WORLD_SIZES = [1, 2, 3]

_RUNNER = "@distkit//testing:run_multirank.sh"
_DISTRUN = "@distkit//tools/distrun:distrun"

def _size_for(timeout_s):
    if timeout_s <= 55:
        return "small"
    if timeout_s <= 290:
        return "medium"
    return "large"

def dk_multirank_test(
        name,
        binary = None,
        binaries = None,
        args = [],
        rank_args = None,
        world_sizes = [1, 2, 3, 4],
        timeout_s = 120,
        data = [],
        tags = [],
        env = {},
        **kwargs):
    """Declares multi-rank tests of `binary` (or the MPMD job `binaries`)."""
    if (binary == None) == (binaries == None):
        fail("dk_multirank_test %s: give exactly one of binary or binaries" % name)
    tests = []
    if binary != None:
        for n in world_sizes:
            test_name = "%s_ws%d" % (name, n)
            native.sh_test(
                name = test_name,
                srcs = [_RUNNER],
                args = ["$(rootpath %s)" % _DISTRUN, str(n), str(timeout_s), "--",
                        "$(rootpath %s)" % binary] + args,
                data = [_DISTRUN, binary] + data,
                size = _size_for(timeout_s),
                tags = tags,
                env = env,
                **kwargs
            )
            tests.append(test_name)
    else:
        if rank_args == None:
            rank_args = [args for _ in binaries]
        if len(rank_args) != len(binaries):
            fail("dk_multirank_test %s: rank_args needs one list per binary" % name)
        programs = []
        for i, b in enumerate(binaries):
            if i > 0:
                programs.append(":")
            programs += ["$(rootpath %s)" % b] + rank_args[i]
        native.sh_test(
            name = name + "_mpmd",
            srcs = [_RUNNER],
            args = ["$(rootpath %s)" % _DISTRUN, str(len(binaries)), str(timeout_s),
                    "--"] + programs,
            data = depset([_DISTRUN] + binaries + data).to_list(),
            size = _size_for(timeout_s),
            tags = tags,
            env = env,
            **kwargs
        )
        tests.append(name + "_mpmd")
    native.test_suite(name = name, tests = tests, tags = tags)
