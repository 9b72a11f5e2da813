"""Torch tensors over memory the library owns (reducer buckets, shards, full
gradients), on the host or on a CUDA device: the library hands out addresses
and the device follows from where it keeps them."""
import ctypes

import torch


class _CudaMemory:
    """Device memory at an address, as torch.as_tensor takes it
    (__cuda_array_interface__): bytes, viewed as the dtype after."""

    def __init__(self, address: int, nbytes: int):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1",
                                         "data": (address, False), "version": 2}


def tensor_at(address: int, numel: int, dtype: torch.dtype,
              device: torch.device = torch.device("cpu")) -> torch.Tensor:
    """A 1-D tensor of `numel` `dtype` elements at `address` on `device`,
    valid while the library keeps that memory."""
    if numel == 0:
        return torch.empty(0, dtype=dtype, device=device)
    nbytes = numel * torch.empty(0, dtype=dtype).element_size()
    if device.type == "cuda":
        return torch.as_tensor(_CudaMemory(address, nbytes), device=device).view(dtype)
    buffer = (ctypes.c_char * nbytes).from_address(address)
    return torch.frombuffer(buffer, dtype=dtype)
