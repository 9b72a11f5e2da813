"""Which device data lives on, and moving it to the communication device and
back (mmengine.dist.utils' device rules and messages)."""
from collections.abc import Iterable, Mapping

import numpy as np
import torch

from .. import device as _device
from . import groups, torch_groups, torch_join


def get_comm_device(group=None) -> torch.device:
    """Where ``group``'s collectives compute, as the library's backend says
    (dk_group_comm_device): cpu for gloo and mpi, cuda:<device> for nccl and
    for "cpu:gloo,cuda:nccl"; cpu when not distributed."""
    if not groups.is_distributed():
        return torch.device("cpu")
    if group is None and groups._torch_only():
        return _by_torch_backend(torch_join.torch_backend())
    if torch_groups.is_torch_group(group):
        twin = torch_groups.twin(group)
        if twin is torch_groups.NOT_FOUND or (twin is None and not groups.joined()):
            import torch.distributed as tdist
            return _by_torch_backend(str(tdist.get_backend(group)))
        group = twin
    return _device.group_comm_device(groups.handle_of(group))


def _by_torch_backend(backend: str) -> torch.device:
    """A group torch.distributed made that distkit has no group for yet
    (user code initialized torch, or called torch's new_group directly):
    asking the library would make distkit's group, a collective call, so
    this answers for torch's group, as get_backend does, by mmengine's rule
    on torch's backend."""
    if backend == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _common_device(items) -> torch.device:
    """The one device of every item in ``items`` (mmengine's rules and texts)."""
    pre = None
    for item in items:
        cur = get_data_device(item)
        if pre is None:
            pre = cur
        elif cur != pre:
            raise ValueError(f"device type in data should be consistent, but got {cur} and {pre}")
    if pre is None:
        raise ValueError("data should not be empty.")
    return pre


def get_data_device(data) -> torch.device:
    if isinstance(data, torch.Tensor):
        return data.device
    elif isinstance(data, Mapping):
        return _common_device(data.values())
    elif isinstance(data, Iterable) and not isinstance(data, str):
        return _common_device(data)
    else:
        raise TypeError(f"data should be a Tensor, sequence of tensor or dict, but got {data}")


def cast_data_device(data, device: torch.device, out=None):
    if out is not None:
        if type(data) != type(out):
            raise TypeError(
                f"out should be the same type with data, but got data is {type(data)} and out "
                f"is {type(data)}")
        if isinstance(out, set):
            raise TypeError("out should not be a set")
    if isinstance(data, torch.Tensor):
        if get_data_device(data) == device:
            data_on_device = data
        else:
            data_on_device = data.to(device)
        if out is not None:
            out.copy_(data_on_device)
        return data_on_device
    elif isinstance(data, Mapping):
        data_on_device = {}
        if out is not None:
            data_len = len(data)
            out_len = len(out)
            if data_len != out_len:
                raise ValueError(
                    f"length of data and out should be same, but got {data_len} and {out_len}")
            for k, v in data.items():
                data_on_device[k] = cast_data_device(v, device, out[k])
        else:
            for k, v in data.items():
                data_on_device[k] = cast_data_device(v, device)
        if len(data_on_device) == 0:
            raise ValueError("data should not be empty")
        return type(data)(data_on_device)  # type: ignore
    elif isinstance(data, Iterable) and not isinstance(data, str) and not isinstance(data, np.ndarray):
        data_on_device = []
        if out is not None:
            for v1, v2 in zip(data, out):
                data_on_device.append(cast_data_device(v1, device, v2))
        else:
            for v in data:
                data_on_device.append(cast_data_device(v, device))
        if len(data_on_device) == 0:
            raise ValueError("data should not be empty")
        return type(data)(data_on_device)  # type: ignore
    else:
        raise TypeError(f"data should be a Tensor, list of tensor or dict, but got {data}")


def move_to(obj, device: torch.device):
    """torch DDP's and FSDP's _to_kwargs for one device: every tensor in
    nested sequences and dicts moved to `device` (non-tensors kept)."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # namedtuple
        return type(obj)(*(move_to(x, device) for x in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(move_to(x, device) for x in obj)
    if isinstance(obj, dict):
        return type(obj)((k, move_to(v, device)) for k, v in obj.items())
    return obj


def on_comm_device(data, group):
    """(tensor on the comm device, input device); numpy arrays stay as they are."""
    if isinstance(data, np.ndarray):
        return data, None
    input_device = get_data_device(data)
    return cast_data_device(data, get_comm_device(group)), input_device


def back_to_input(data_on_device, data, input_device) -> None:
    """Writes a collective's result back into the caller's ``data``. A single
    tensor goes in one copy through the library (dk_tensor_copy), not
    mmengine's two (``.to`` then ``copy_``)."""
    if input_device is None:
        return
    if (isinstance(data, torch.Tensor) and isinstance(data_on_device, torch.Tensor)
            and data.is_contiguous() and data_on_device.is_contiguous()
            and data.dtype == data_on_device.dtype and data.numel() == data_on_device.numel()
            and _device.library_reaches(data.device)
            and _device.library_reaches(data_on_device.device)):
        _device.copy_tensor(data_on_device, data)
        return
    cast_data_device(data_on_device, input_device, out=data)
