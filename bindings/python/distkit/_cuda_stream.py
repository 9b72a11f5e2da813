"""CUDA operations follow torch's current stream, as torch's own NCCL
process group does: before an operation on CUDA tensors is issued, the
group is told the stream (dk_group_set_cuda_stream), and the operation then
waits for the work issued on it so far, not for the legacy default stream
(torch's side streams do not synchronize with that one)."""
import ctypes

from ._lib import lib, raise_for_status


def follow_current_stream(handle, tensors) -> None:
    """Points group ``handle`` (None: the default group) at torch's current
    stream on the device of the first CUDA tensor in ``tensors``."""
    for t in tensors:
        if getattr(t, "is_cuda", False):
            import torch
            stream = torch.cuda.current_stream(t.device).cuda_stream
            raise_for_status(lib.dk_group_set_cuda_stream, handle, ctypes.c_void_p(stream))
            return
