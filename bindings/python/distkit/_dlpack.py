"""Passes torch tensors and numpy arrays to the ABI as DLTensor* without
copying: the tensor exports a DLPack capsule; the DLTensor inside it points at
the tensor's own memory, so results are written in place.
"""
import ctypes

from ._lib import DLTensor

_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]

_DL_UINT = 1


class Borrowed:
    """A DLTensor* view of a tensor; keep this object alive during the call."""

    def __init__(self, tensor):
        import torch

        self.owner = tensor
        is_bool = False
        if isinstance(tensor, torch.Tensor):
            if tensor.dtype == torch.bool:
                # torch 1.13 cannot export bool: pass the bytes, typed as bool.
                tensor = tensor.view(torch.uint8)
                is_bool = True
            self.capsule = torch.utils.dlpack.to_dlpack(tensor)
        else:
            import numpy as np

            if isinstance(tensor, np.ndarray) and tensor.dtype == np.bool_:
                tensor = tensor.view(np.uint8)
                is_bool = True
            self.capsule = tensor.__dlpack__()
        address = _get_pointer(self.capsule, b"dltensor")
        # DLManagedTensor starts with its DLTensor.
        self.dltensor = DLTensor.from_address(address)
        if is_bool:
            self.dltensor.dtype.code = _DL_UINT
            self.dltensor.dtype.bits = 1  # distkit's bool convention
        self.pointer = ctypes.pointer(self.dltensor)
