"""The tests the Go and Rust bindings share: each binding builds the same
multi-rank programs in its own language (capi's C tests, ported), and both run
them the same ways, so the targets are declared here once.

    load("//bindings:binding_tests.bzl", "dk_binding_tests")

    dk_binding_tests(binding = "go", sources = glob(["*.go"]))

The calling package defines `local_test_bin` (the binding's unit tests in one
process) and `<test>_multirank_test_program` for each test in
MULTIRANK_PROGRAMS.
"""

load("@local_cuda//:defs.bzl", "FOUND")
load("//testing/gpu_sim:sim.bzl", "SIM_DATA", "SIM_ENV")
load("//testing:multirank.bzl", "dk_multirank_test")

# The multi-rank programs every binding builds, by test name.
MULTIRANK_PROGRAMS = [
    "collectives",
    "gpu_sim",
    "shrink",
    "grow",
    "sharded_elastic",
    "elastic",
]

# World sizes for recovery tests: a rank dies, so 1 has no survivor; 2 leaves
# one alone (a group of one), 3 and 4 have bystanders.
RECOVERY_WORLD_SIZES = [2, 3, 4]

_HEADER = "//capi:include/distkit/distkit.h"

def _program(test):
    return ":%s_multirank_test_program" % test

def _grow_and_shrink(prefix):
    """The elastic programs' two endings: grown back with distrun's
    replacement, or shrunk to the survivors."""
    return {
        prefix + "_grow_test": {
            "args": ["grow"],
            "distrun_args": ["--max-replacements", "1"],
        },
        prefix + "_shrink_test": {
            "args": ["shrink"],
            "distrun_args": ["--min-ranks", "1"],
        },
    }

def dk_unit_test(name, binary, **kwargs):
    """A test binary built by a genrule (go test -c, rustc --test), run as is."""
    native.sh_test(
        name = name,
        size = "small",
        srcs = [binary],
        **kwargs
    )

def dk_binding_tests(binding, sources, local_args = []):
    """Declares a binding's shared tests.

    `binding` is the name tools/abi_coverage.py knows it by; `sources` are the
    files holding its C ABI calls; `local_args` go to local_test_bin.
    """

    # The binding in one process: store, world of one, errors.
    dk_unit_test(
        name = "local_test",
        binary = ":local_test_bin",
        args = local_args,
    )

    # README.md's table of the C ABI functions this binding wraps is current
    # (tools/abi_coverage.py --write regenerates it).
    native.py_test(
        name = "abi_coverage_test",
        size = "small",
        srcs = ["//tools:abi_coverage.py"],
        args = ["--check", binding],
        data = sources + ["README.md", _HEADER],
        main = "//tools:abi_coverage.py",
        python_version = "PY3",
    )

    # Every operation, element type and misuse, in every rank of a real job.
    dk_multirank_test(
        name = "collectives_test",
        binary = _program("collectives"),
        timeout_s = 55,
    )

    # Device memory through the binding (DeviceSlice) in an nccl job on the
    # CUDA + NCCL simulator (testing/gpu_sim), a device per rank, where CUDA's
    # and NCCL's headers were found at build time.
    if FOUND:
        dk_multirank_test(
            name = "gpu_sim_test",
            binary = _program("gpu_sim"),
            data = SIM_DATA,
            env = SIM_ENV,
            timeout_s = 55,
        )

    # Recovery without restarting: the last rank dies mid-training, the
    # survivors shrink the world and finish at world size - 1 with the right
    # weights; over shared memory and over TCP.
    for suffix, env in [("", {}), ("_tcp", {"DISTKIT_SHM": "0"})]:
        dk_multirank_test(
            name = "shrink%s_test" % suffix,
            binary = _program("shrink"),
            env = env,
            timeout_s = 55,
            world_sizes = RECOVERY_WORLD_SIZES,
        )

    # Growing back, under distrun --max-replacements 1 (capi's grow_c_tests):
    # rank 1 SIGKILLs itself mid-training; the survivors shrink and train at
    # world size - 1 (or, "direct", grow straight from the failed world), then
    # grow while distrun's replacement joins through init; rank order, the
    # step counter broadcast to the newcomer and every sum checked.
    dk_multirank_test(
        name = "grow_tests",
        binary = _program("grow"),
        distrun_args = ["--max-replacements", "1"],
        timeout_s = 55,
        variants = {
            "grow_test": {},
            "grow_direct_test": {"args": ["direct"]},
        },
        world_sizes = RECOVERY_WORLD_SIZES,
    )

    # The elastic loops, each ending grown back with distrun's replacement
    # or shrunk to the survivors; the final weights equal an uninterrupted
    # run's computed in the program (in double precision).
    #   elastic (capi's elastic_c_tests): a model trained on rank-dependent
    #     shares of a fixed global batch, committed to a Snapshot every 4
    #     steps; a rank SIGKILLs itself mid-step; everyone syncs the snapshot
    #     and redoes the steps since the commit.
    #   sharded_elastic (capi's sharded_elastic_c_tests), of a sharded (FSDP)
    #     trainer: a Shard's weights and their momentum in a ShardedSnapshot;
    #     the replacement fetches its shard from its neighbour's memory, or
    #     the survivors re-shard every shard over fewer ranks.
    for test in ["sharded_elastic", "elastic"]:
        dk_multirank_test(
            name = test + "_tests",
            binary = _program(test),
            timeout_s = 55,
            variants = _grow_and_shrink(test),
            world_sizes = RECOVERY_WORLD_SIZES,
        )

    # ShardedSnapshot's pieces (the same program, argument "pieces"): every
    # shard back on groups that leave ranks out as a loss would, DataLoss
    # when neighbours go together, a unit re-sharded through its sharded
    # load.
    dk_multirank_test(
        name = "sharded_snapshot_test",
        args = ["pieces"],
        binary = _program("sharded_elastic"),
        timeout_s = 55,
        world_sizes = [1] + RECOVERY_WORLD_SIZES,
    )
