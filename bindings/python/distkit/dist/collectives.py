"""Tensor collectives, mmengine's names and rules: data not on the
communication device is cast there and back; world size 1 is a no-op."""
import ctypes
from typing import Optional

import numpy as np
import torch

from .. import _lib
from .._dlpack import Borrowed
from .._lib import check, lib
from .devices import back_to_input, on_comm_device
from .groups import ProcessGroup, get_backend, get_rank, get_world_size, handle_of


def _get_reduce_op(name: str) -> int:
    """The DK_OP_* code of an mmengine op name (mean is all_reduce's own)."""
    if name.lower() not in _lib.REDUCE_OPS:
        raise ValueError(f"reduce op should be one of {_lib.REDUCE_OPS.keys()}, bug got {name}")
    return _lib.REDUCE_OPS[name.lower()]


def _op_code(op: str) -> int:
    return _lib.OP_MEAN if op.lower() == "mean" else _get_reduce_op(op)


def _on_cpu_comm_device(data, group) -> bool:
    """The common case: a CPU tensor and a CPU backend. The collective then
    works on the caller's tensor itself and nothing is cast back (mmengine's
    final copy would copy the tensor onto itself)."""
    return (isinstance(data, torch.Tensor) and data.device.type == "cpu"
            and get_backend(group) != "nccl")


def all_reduce(data, op: str = "sum", group: Optional[ProcessGroup] = None) -> None:
    if get_world_size(group) > 1:
        code = _op_code(op)
        if _on_cpu_comm_device(data, group):
            view = Borrowed(data)
            check(lib.dk_group_all_reduce, handle_of(group), view.pointer, code, None)
            return
        data_on_device, input_device = on_comm_device(data, group)
        view = Borrowed(data_on_device)
        check(lib.dk_group_all_reduce, handle_of(group), view.pointer, code, None)
        back_to_input(data_on_device, data, input_device)


def reduce(data, dst: int = 0, op: str = "sum", group: Optional[ProcessGroup] = None) -> None:
    """Reduces ``data`` from every rank into ``dst``'s, in place (same op names
    as all_reduce). Other ranks' data is left as it was."""
    if get_world_size(group) > 1:
        code = _op_code(op)
        data_on_device, input_device = on_comm_device(data, group)
        view = Borrowed(data_on_device)
        check(lib.dk_group_reduce, handle_of(group), view.pointer, code, dst, None)
        if get_rank(group) == dst:
            back_to_input(data_on_device, data, input_device)


def all_gather(data, group: Optional[ProcessGroup] = None) -> list:
    world_size = get_world_size(group)
    if world_size == 1:
        return [data]
    if isinstance(data, np.ndarray):
        out = np.empty((world_size,) + data.shape, dtype=data.dtype)
        a, b = Borrowed(np.ascontiguousarray(data)), Borrowed(out)
        check(lib.dk_group_all_gather, handle_of(group), a.pointer, b.pointer, None)
        return list(out)
    data_on_device, input_device = on_comm_device(data, group)
    out = torch.empty((world_size,) + tuple(data_on_device.shape), dtype=data_on_device.dtype,
                      device=data_on_device.device)
    a, b = Borrowed(data_on_device), Borrowed(out)
    check(lib.dk_group_all_gather, handle_of(group), a.pointer, b.pointer, None)
    return [t.to(input_device) for t in out.unbind(0)]


def gather(data, dst: int = 0, group: Optional[ProcessGroup] = None) -> list:
    world_size = get_world_size(group)
    if world_size == 1:
        return [data]
    is_dst = get_rank(group) == dst
    data_on_device, input_device = on_comm_device(data, group)
    out = None
    if is_dst:
        out = torch.empty((world_size,) + tuple(data_on_device.shape), dtype=data_on_device.dtype,
                          device=data_on_device.device)
    a = Borrowed(data_on_device)
    b = Borrowed(out) if out is not None else None
    check(lib.dk_group_gather, handle_of(group), a.pointer, b.pointer if b else None, dst, None)
    if not is_dst:
        return []
    return [t.to(input_device) if input_device is not None else t for t in out.unbind(0)]


def broadcast(data, src: int = 0, group: Optional[ProcessGroup] = None) -> None:
    if get_world_size(group) > 1:
        data_on_device, input_device = on_comm_device(data, group)
        if not isinstance(data_on_device, np.ndarray):
            data_on_device = data_on_device.contiguous()
        view = Borrowed(data_on_device)
        check(lib.dk_group_broadcast, handle_of(group), view.pointer, src, None)
        if get_rank(group) != src:
            back_to_input(data_on_device, data, input_device)


def sync_random_seed(group: Optional[ProcessGroup] = None) -> int:
    """Rank 0's random seed on every rank. Every rank draws from numpy first,
    as mmengine does (so numpy's generator advances alike); world size 1
    returns that draw, otherwise the library draws and broadcasts rank 0's
    (dk_group_sync_random_seed)."""
    seed = int(np.random.randint(2**31))
    if get_world_size(group) == 1:
        return seed
    out = ctypes.c_int32()
    check(lib.dk_group_sync_random_seed, handle_of(group), ctypes.byref(out))
    return out.value


def all_reduce_dict(data: dict, op: str = "sum", group: Optional[ProcessGroup] = None) -> None:
    assert isinstance(data, dict), "all_reduce_dict only supports dict type"
    if get_world_size(group) > 1:
        keys = sorted(data.keys())
        tensor_shapes = [data[k].shape for k in keys]
        tensor_numels = [data[k].numel() for k in keys]
        flatten_tensor = torch.cat([data[k].flatten() for k in keys])
        all_reduce(flatten_tensor, op=op, group=group)
        split_tensors = [x.reshape(shape) for x, shape in
                         zip(torch.split(flatten_tensor, tensor_numels), tensor_shapes)]
        for k, v in zip(keys, split_tensors):
            data[k] = v


def all_reduce_params(params, coalesce: bool = True, bucket_size_mb: int = -1, op: str = "sum",
                      group: Optional[ProcessGroup] = None) -> None:
    if get_world_size(group) == 1:
        return
    params_data = [param.data for param in params]
    code = _op_code(op)
    views = [Borrowed(t) for t in params_data]
    array = _lib.tensor_array(views)
    check(lib.dk_group_all_reduce_coalesced, handle_of(group), array, len(views), code,
          1 if coalesce else 0, bucket_size_mb)
