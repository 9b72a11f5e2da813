"""dk_multirank_test: one Bazel test target per world size, each running real
processes through distrun (the same machinery users launch jobs with).

Load it from a BUILD file, also in a workspace that vendors distkit as
@distkit:

    load("@distkit//testing:multirank.bzl", "dk_multirank_test")

    dk_multirank_test(
        name = "allreduce_test",
        srcs = ["allreduce_multirank_test.cc"],  # .cc, .c or .py
        deps = [":group", "//testing/cc:rank_check"],
        args = ["--size", "1024"],
        world_sizes = [1, 2, 3, 4],    # -> allreduce_test_ws1 ... _ws4
        timeout_s = 120,               # distrun stops every rank after this
    )

This builds the program `allreduce_test_program` from `srcs` and `deps` (a
cc_binary for C and C++ sources, a py_binary for Python ones; `copts` and
`linkopts` go to the cc_binary), and defines `allreduce_test_ws1` ...
`allreduce_test_ws4` and a test_suite `allreduce_test` holding them. A program
built otherwise (a Go or Rust genrule, one program shared by several test
targets) is passed as `binary = ":label"` instead of `srcs`. Multi-rank
programs are named `*_multirank_test.<ext>` so that people and layout tools
read them as tests. Each rank sees torchrun's variables (RANK,
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

def dk_test_size(timeout_s):
    """The test size whose default timeout covers `timeout_s` with room for
    start-up (also for testing/netns)."""
    if timeout_s <= 55:
        return "small"
    if timeout_s <= 290:
        return "medium"
    return "large"

def _program(name, srcs, deps, copts, linkopts):
    """Builds a multi-rank test's program from its sources; returns its label."""
    program = name + "_program"
    if all([s.endswith(".py") for s in srcs]):
        native.py_binary(
            name = program,
            testonly = True,
            srcs = srcs,
            main = srcs[0],
            python_version = "PY3",
            deps = deps,
        )
    else:
        native.cc_binary(
            name = program,
            testonly = True,
            srcs = srcs,
            copts = copts,
            linkopts = linkopts,
            deps = deps,
        )
    return ":" + program

def _per_size_tests(name, binary, args, world_sizes, timeout_s, data, tags, env, kwargs, distrun_args = []):
    tests = []
    for n in world_sizes:
        test_name = "%s_ws%d" % (name, n)
        native.sh_test(
            name = test_name,
            srcs = [_RUNNER],
            args = ["$(rootpath %s)" % _DISTRUN, str(n), str(timeout_s)] + distrun_args + ["--",
                    "$(rootpath %s)" % binary] + args,
            data = [_DISTRUN, binary] + data,
            size = dk_test_size(timeout_s),
            tags = tags,
            env = env,
            **kwargs
        )
        tests.append(test_name)
    native.test_suite(name = name, tests = tests, tags = tags)

def dk_multirank_test(
        name,
        srcs = None,
        deps = [],
        copts = [],
        linkopts = [],
        binary = None,
        binaries = None,
        args = [],
        rank_args = None,
        world_sizes = [1, 2, 3, 4],
        timeout_s = 120,
        data = [],
        tags = [],
        env = {},
        variants = None,
        distrun_args = [],
        **kwargs):
    """Declares multi-rank tests of the program built from `srcs` (or of
    `binary`, or of the MPMD job `binaries`).

    `variants` runs one program several ways without building it twice: a
    dict from a test name to the `args`, `env`, `world_sizes` and `timeout_s`
    that differ from the call's own, e.g.

        variants = {
            "collectives_test": {"world_sizes": [1, 2]},
            "collectives_tcp_test": {"env": {"DISTKIT_SHM": "0"}},
        }

    declares collectives_test_ws1, collectives_tcp_test_ws1 ... and a
    test_suite `name` holding every variant.

    `distrun_args` are flags for distrun itself, e.g. ["--max-replacements",
    "1"] for a test in which a rank dies and a replacement joins.
    """
    if srcs != None:
        if binary != None or binaries != None:
            fail("dk_multirank_test %s: give srcs, binary or binaries, not two" % name)
        binary = _program(name, srcs, deps, copts, linkopts)
    elif deps or copts or linkopts:
        fail("dk_multirank_test %s: deps, copts and linkopts need srcs" % name)
    if (binary == None) == (binaries == None):
        fail("dk_multirank_test %s: give exactly one of srcs, binary or binaries" % name)
    if variants != None:
        if binary == None:
            fail("dk_multirank_test %s: variants need one program (srcs or binary)" % name)
        for test_name, v in variants.items():
            for key in v:
                if key not in ["args", "env", "world_sizes", "timeout_s", "distrun_args"]:
                    fail("dk_multirank_test %s: variant %s: unknown key %s" % (name, test_name, key))
            _per_size_tests(
                test_name,
                binary,
                v.get("args", args),
                v.get("world_sizes", world_sizes),
                v.get("timeout_s", timeout_s),
                data,
                tags,
                v.get("env", env),
                kwargs,
                v.get("distrun_args", distrun_args),
            )
        native.test_suite(name = name, tests = [":" + t for t in variants], tags = tags)
        return
    if binary != None:
        _per_size_tests(name, binary, args, world_sizes, timeout_s, data, tags, env, kwargs, distrun_args)
        return
    if distrun_args:
        fail("dk_multirank_test %s: distrun_args with binaries is not supported" % name)
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
        size = dk_test_size(timeout_s),
        tags = tags,
        env = env,
        **kwargs
    )
    native.test_suite(name = name, tests = [name + "_mpmd"], tags = tags)
