"""What the mmengine-style model wrappers' train_step / val_step / test_step
share (distkit.model's DDP wrappers and model_fsdp's FSDP one): running
forward in a mode, and mmengine's parse_losses."""
from collections import OrderedDict
from typing import Any, Dict

import torch


def run_forward(model, data, mode: str, expected: str = "list, tuple or dict"):
    """``model(**data, mode=mode)`` or ``model(*data, mode=mode)`` for what a
    data preprocessor returned. `expected` words the TypeError as the
    caller's mmengine counterpart does (its FSDP train_step omits a comma)."""
    if isinstance(data, dict):
        return model(**data, mode=mode)
    if isinstance(data, (list, tuple)):
        return model(*data, mode=mode)
    raise TypeError(f"Output of `data_preprocessor` should be {expected}, "
                    f"but got {type(data)}")


def parse_losses(losses: Dict[str, Any]):
    """mmengine's BaseModel.parse_losses: every tensor (or list of tensors) is
    averaged; the sum of the entries whose key contains 'loss' is the loss."""
    log_vars = []
    for name, value in losses.items():
        if isinstance(value, torch.Tensor):
            log_vars.append([name, value.mean()])
        elif isinstance(value, (list, tuple)) and all(isinstance(v, torch.Tensor) for v in value):
            log_vars.append([name, sum(v.mean() for v in value)])
        else:
            raise TypeError(f"{name} is not a tensor or list of tensors")
    loss = sum(value for key, value in log_vars if "loss" in key)
    log_vars.insert(0, ["loss", loss])
    return loss, OrderedDict(log_vars)
