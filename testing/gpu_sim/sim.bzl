"""What a test needs to run distkit's GPU path on the CUDA + NCCL simulator.

    load("//testing/gpu_sim:sim.bzl", "SIM_DATA", "SIM_ENV")
    dk_multirank_test(..., data = SIM_DATA, env = SIM_ENV)

A device per rank (4, the largest default world size). Only where CUDA's
and NCCL's headers were found (@local_cuda's FOUND): the simulator is built
against them.
"""

_SIM = "//testing/gpu_sim:libdkgpusim.so"

SIM_DATA = [_SIM]

SIM_ENV = {
    "DISTKIT_CUDART_LIBRARY": "$(rootpath %s)" % _SIM,
    "DISTKIT_NCCL_LIBRARY": "$(rootpath %s)" % _SIM,
    "DKSIM_DEVICES": "4",
}
