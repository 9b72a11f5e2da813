"""distkit: distributed-training communication over a stable C ABI.

    from distkit import dist          # mmengine.dist's API
    from distkit import distributed   # modelopt.torch.utils.distributed's API
    from distkit.device import get_device

Importing it registers torch.distributed's "distkit" backend
(torch_backend.py).
"""
from . import device, dist, distributed, errors, torch_backend
from .errors import DistkitError

__version__ = "0.3.0"  # the same as pyproject.toml
__all__ = ["DistkitError", "device", "dist", "distributed", "errors"]
