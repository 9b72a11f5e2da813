"""Devices. get_device is mmengine.device.get_device: the device string, fixed
at import time, first available in the order npu > cuda > mlu > mps > dipu >
musa > cpu. rank_device, group_comm_device and copy_tensor ask the library
(dk_get_device, dk_group_comm_device, dk_tensor_copy), so Python sees the
devices the C ABI communicates on."""
import ctypes

import torch

from . import _lib
from ._dlpack import Borrowed
from ._lib import lib, raise_for_status

_DL_CUDA = 2  # DLPack kDLCUDA


def _detect() -> str:
    if hasattr(torch, "npu") and getattr(torch.npu, "is_available", lambda: False)():
        return "npu"
    if torch.cuda.is_available():
        return "cuda"
    if hasattr(torch, "mlu") and getattr(torch.mlu, "is_available", lambda: False)():
        return "mlu"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return "mps"
    if hasattr(torch, "dipu"):
        return "dipu"
    if hasattr(torch, "musa") and getattr(torch.musa, "is_available", lambda: False)():
        return "musa"
    return "cpu"


DEVICE = _detect()


def get_device() -> str:
    """Returns the available device: 'npu', 'cuda', 'mlu', 'mps', 'dipu', 'musa' or 'cpu'."""
    return DEVICE


def _torch_device(device: _lib.DLDevice) -> torch.device:
    if device.device_type == _DL_CUDA:
        return torch.device("cuda", device.device_id)
    return torch.device("cpu")


def rank_device() -> torch.device:
    """This rank's device as the library sees it: cuda:<local rank> when
    libdistkit was built with CUDA and a GPU is usable, else the CPU."""
    out = _lib.DLDevice()
    lib.dk_get_device(ctypes.byref(out))
    return _torch_device(out)


def group_comm_device(handle) -> torch.device:
    """Where the group ``handle`` (a dk_group_t*; None: the default group)
    runs its collectives, as its backend says (dk_group_comm_device): the
    CPU for gloo and mpi, the GPU for nccl and "cpu:gloo,cuda:nccl"."""
    out = _lib.DLDevice()
    raise_for_status(lib.dk_group_comm_device, handle, ctypes.byref(out))
    return _torch_device(out)


def library_reaches(device: torch.device) -> bool:
    """Whether libdistkit can read and write memory on ``device``."""
    return device.type == "cpu" or (device.type == "cuda" and rank_device().type == "cuda")


def copy_tensor(src, dst) -> None:
    """Copies ``src`` into ``dst`` (torch tensors or numpy arrays; same dtype
    and element count, both contiguous), across devices in one copy."""
    if any(isinstance(t, torch.Tensor) and t.is_cuda for t in (src, dst)):
        torch.cuda.current_stream().synchronize()  # the copy runs outside torch's stream
    a, b = Borrowed(src), Borrowed(dst)
    raise_for_status(lib.dk_tensor_copy, a.pointer, b.pointer)
