"""The benchmarks' LibTorch rank programs, all built alike."""

load("@system_torch//:torch.bzl", "TORCH_COPTS")

def torch_rank_binary(name):
    """<name>.cc: one rank of a LibTorch arm, on distkit's cc/torch."""
    native.cc_binary(
        name = name,
        srcs = [name + ".cc"],
        copts = TORCH_COPTS,
        deps = [
            "//cc/dist_api",
            "//cc/torch",
            "@system_absl//:absl",
            "@system_torch//:torch",
        ],
    )
