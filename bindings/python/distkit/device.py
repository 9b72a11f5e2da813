"""mmengine.device.get_device: the device string, fixed at import time, first
available in the order npu > cuda > mlu > mps > dipu > musa > cpu."""
import torch


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
