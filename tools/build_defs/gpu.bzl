"""dk_gpu_cc_test: a cc_test that needs a GPU, and CUDA and NCCL to build.

On a machine with a usable GPU (@local_cuda's GPU) and CUDA and NCCL found,
this is a plain cc_test. Anywhere else `bazel test //...` reports it SKIPPED,
never PASSED: the test target is incompatible with this machine (Bazel's
incompatible target skipping), so nothing pretends to have run. Where CUDA
and NCCL were found the program is still built (`<name>_program`, a
cc_binary), so a CPU-only machine proves that the GPU tests compile and link.
"""

load("@local_cuda//:defs.bzl", "FOUND", "GPU")

# A constraint no platform on a machine without a GPU has: targets that name
# it in target_compatible_with are skipped there.
_NEEDS_GPU = ["//tools/build_defs:usable_gpu"]

def dk_gpu_cc_test(name, srcs, deps = [], size = "small", **kwargs):
    if not FOUND:
        # Nothing to build against: the label stays, and Bazel reports it
        # SKIPPED (incompatible), never passed.
        native.sh_test(
            name = name,
            srcs = ["//tools/build_defs:gpu_skip.sh"],
            size = "small",
            target_compatible_with = _NEEDS_GPU,
        )
        return
    native.cc_binary(
        name = name + "_program",
        testonly = True,
        srcs = srcs,
        deps = deps + ["@local_cuda//:cuda", "@local_cuda//:nccl"],
        **kwargs
    )
    native.sh_test(
        name = name,
        size = size,
        srcs = ["//tools/build_defs:run_program.sh"],
        args = ["$(rootpath :%s_program)" % name],
        data = [":%s_program" % name],
        target_compatible_with = [] if GPU else _NEEDS_GPU,
    )
