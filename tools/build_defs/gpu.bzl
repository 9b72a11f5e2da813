"""dk_gpu_cc_test: a cc_test that needs CUDA and NCCL at build time.

When @local_cuda found them, this is a plain cc_test (which must itself report
"no GPU" and pass when the machine has no usable GPU). When it did not, the
target becomes a test that prints why it was skipped, so `bazel test //...`
passes on CPU-only machines and says what it did not build.
"""

load("@local_cuda//:defs.bzl", "FOUND", "REASON")

def dk_gpu_cc_test(name, srcs, deps = [], **kwargs):
    if FOUND:
        native.cc_test(
            name = name,
            srcs = srcs,
            deps = deps + ["@local_cuda//:cuda", "@local_cuda//:nccl"],
            **kwargs
        )
    else:
        native.sh_test(
            name = name,
            srcs = ["//tools/build_defs:gpu_skip.sh"],
            args = ["'%s'" % REASON],
            size = "small",
        )
