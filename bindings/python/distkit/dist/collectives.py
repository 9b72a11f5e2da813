"""Tensor collectives, mmengine's names and rules: data not on the
communication device is cast there and back; world size 1 is a no-op."""
from typing import Optional

import numpy as np
import torch

from .. import _lib
from .._cuda_stream import follow_current_stream
from .._dlpack import Borrowed
from .._lib import lib
from .devices import back_to_input, on_comm_device
from .call_forms import Form, choose
from .groups import (ProcessGroup, get_global_rank, get_group_rank, get_rank,
                     get_world_size, handle_of, transport)
from .refusals import call_collective, fail_together, group_at, issued
from .work import Work, start


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
            and transport(group) != "nccl")


def _run(fn, args: tuple, async_op: bool, keep=(), then=None):
    """Calls ABI collective ``fn`` blocking, or (async_op) starts it and
    returns a Work that runs ``then`` once it is done."""
    follow_current_stream(args[0], keep)
    if async_op:
        handle = start(fn, *args)
        issued()
        return Work(handle, keep, then)
    call_collective(fn, *args, None)
    if then is not None:
        then()
    return None


@fail_together(group_at(2))
def all_reduce(data, op: str = "sum", group: Optional[ProcessGroup] = None,
               async_op: bool = False):
    """In place. ``async_op=True``: returns a Work (the tensor is lent until
    it is waited for)."""
    if get_world_size(group) == 1:
        return Work(None) if async_op else None
    code = _op_code(op)
    if _on_cpu_comm_device(data, group):
        view = Borrowed(data)
        return _run(lib.dk_group_all_reduce, (handle_of(group), view.pointer, code), async_op,
                    [view, data])
    data_on_device, input_device = on_comm_device(data, group)
    view = Borrowed(data_on_device)
    return _run(lib.dk_group_all_reduce, (handle_of(group), view.pointer, code), async_op,
                [view, data_on_device],
                lambda: back_to_input(data_on_device, data, input_device))


@fail_together(group_at(3))
def reduce(data, dst: int = 0, op: str = "sum", group: Optional[ProcessGroup] = None,
           async_op: bool = False):
    """Reduces ``data`` from every rank into ``dst``'s (a global rank, as in
    torch), in place (same op names as all_reduce). Other ranks' data is left
    as it was."""
    if get_world_size(group) == 1:
        return Work(None) if async_op else None
    code = _op_code(op)
    root = get_group_rank(group, dst)
    data_on_device, input_device = on_comm_device(data, group)
    view = Borrowed(data_on_device)

    def back():
        if get_rank(group) == root:
            back_to_input(data_on_device, data, input_device)
    return _run(lib.dk_group_reduce, (handle_of(group), view.pointer, code, root), async_op,
                [view, data_on_device], back)


_ALL_GATHER_FORMS = (
    Form("all_gather(tensor_list, tensor, group=None, async_op=False)",
         lambda tensor_list, tensor, group=None, async_op=False: None),
    Form("all_gather(data, group=None)", lambda data, group=None: None))


@fail_together(group_at(1, seed_position=2))
def all_gather(*args, **kwargs):
    """mmengine's ``all_gather(data, group=None)`` returns every rank's data
    in a list; the seed's (torch's) ``all_gather(tensor_list, tensor,
    group=None, async_op=False)`` fills ``tensor_list`` in place (a first
    argument that is a list)."""
    first = args[0] if args else kwargs.get("tensor_list", kwargs.get("data"))
    seed, a = choose("all_gather", *_ALL_GATHER_FORMS, args, kwargs,
                     isinstance(first, list) or "tensor_list" in kwargs)
    if not seed:
        return _all_gather(a["data"], a["group"])
    tensor_list, tensor, group = a["tensor_list"], a["tensor"], a["group"]
    world_size = get_world_size(group)
    if len(tensor_list) != world_size:
        raise ValueError(f"all_gather: tensor_list has {len(tensor_list)} tensors for a group "
                         f"of {world_size} ranks")
    if world_size == 1:
        tensor_list[0].copy_(tensor)
        return Work(None) if a["async_op"] else None
    data_on_device, _ = on_comm_device(tensor, group)
    out = torch.empty((world_size,) + tuple(data_on_device.shape), dtype=data_on_device.dtype,
                      device=data_on_device.device)
    a_view, b_view = Borrowed(data_on_device.contiguous()), Borrowed(out)

    def fill():
        for slot, value in zip(tensor_list, out.unbind(0)):
            slot.copy_(value)
    return _run(lib.dk_group_all_gather, (handle_of(group), a_view.pointer, b_view.pointer),
                a["async_op"], [a_view, b_view, out], fill)


def _all_gather(data, group) -> list:
    world_size = get_world_size(group)
    if world_size == 1:
        return [data]
    if isinstance(data, np.ndarray):
        out = np.empty((world_size,) + data.shape, dtype=data.dtype)
        a, b = Borrowed(np.ascontiguousarray(data)), Borrowed(out)
        call_collective(lib.dk_group_all_gather, handle_of(group), a.pointer, b.pointer, None)
        return list(out)
    data_on_device, input_device = on_comm_device(data, group)
    out = torch.empty((world_size,) + tuple(data_on_device.shape), dtype=data_on_device.dtype,
                      device=data_on_device.device)
    a, b = Borrowed(data_on_device), Borrowed(out)
    call_collective(lib.dk_group_all_gather, handle_of(group), a.pointer, b.pointer, None)
    return [t.to(input_device) for t in out.unbind(0)]


_GATHER_FORMS = (
    Form("gather(tensor, gather_list=None, dst=0, group=None, async_op=False)",
         lambda tensor, gather_list=None, dst=0, group=None, async_op=False: None),
    Form("gather(data, dst=0, group=None)", lambda data, dst=0, group=None: None))


@fail_together(group_at(2, seed_position=3))
def gather(*args, **kwargs):
    """mmengine's ``gather(data, dst=0, group=None)`` returns the list on
    ``dst`` ([] elsewhere); the seed's (torch's) ``gather(tensor,
    gather_list=None, dst=0, group=None, async_op=False)`` fills
    ``gather_list`` on ``dst`` (a second argument that is a list or None, or
    gather_list= / async_op=). ``dst`` is a global rank."""
    second = args[1] if len(args) > 1 else 0
    seed, a = choose("gather", *_GATHER_FORMS, args, kwargs,
                     "gather_list" in kwargs or "async_op" in kwargs or "tensor" in kwargs
                     or (len(args) > 1 and (second is None or isinstance(second, list))))
    if not seed:
        return _gather(a["data"], a["dst"], a["group"])
    tensor, gather_list, group = a["tensor"], a["gather_list"], a["group"]
    world_size = get_world_size(group)
    root = get_group_rank(group, a["dst"])
    is_dst = get_rank(group) == root
    if is_dst and (gather_list is None or len(gather_list) != world_size):
        raise ValueError(f"gather: the destination needs a gather_list of {world_size} tensors")
    if world_size == 1:
        gather_list[0].copy_(tensor)
        return Work(None) if a["async_op"] else None
    data_on_device, _ = on_comm_device(tensor, group)
    data_on_device = data_on_device.contiguous()
    out = torch.empty((world_size,) + tuple(data_on_device.shape), dtype=data_on_device.dtype,
                      device=data_on_device.device) if is_dst else None
    a_view = Borrowed(data_on_device)
    b_view = Borrowed(out) if out is not None else None

    def fill():
        if is_dst:
            for slot, value in zip(gather_list, out.unbind(0)):
                slot.copy_(value)
    return _run(lib.dk_group_gather, (handle_of(group), a_view.pointer,
                                      b_view.pointer if b_view else None, root),
                a["async_op"], [a_view, b_view, out, data_on_device], fill)


def _gather(data, dst: int, group) -> list:
    world_size = get_world_size(group)
    if world_size == 1:
        return [data]
    root = get_group_rank(group, dst)
    is_dst = get_rank(group) == root
    data_on_device, input_device = on_comm_device(data, group)
    out = None
    if is_dst:
        out = torch.empty((world_size,) + tuple(data_on_device.shape), dtype=data_on_device.dtype,
                          device=data_on_device.device)
    a = Borrowed(data_on_device)
    b = Borrowed(out) if out is not None else None
    call_collective(lib.dk_group_gather, handle_of(group), a.pointer, b.pointer if b else None,
                    root, None)
    if not is_dst:
        return []
    return [t.to(input_device) if input_device is not None else t for t in out.unbind(0)]


@fail_together(group_at(2))
def broadcast(data, src: int = 0, group: Optional[ProcessGroup] = None, async_op: bool = False):
    """In place, from ``src`` (a global rank, as in torch)."""
    if get_world_size(group) == 1:
        return Work(None) if async_op else None
    root = get_group_rank(group, src)
    data_on_device, input_device = on_comm_device(data, group)
    if not isinstance(data_on_device, np.ndarray):
        data_on_device = data_on_device.contiguous()
    view = Borrowed(data_on_device)

    def back():
        if get_rank(group) != root:
            back_to_input(data_on_device, data, input_device)
    return _run(lib.dk_group_broadcast, (handle_of(group), view.pointer, root), async_op,
                [view, data_on_device], back)


_SEED_FORMS = (
    Form("sync_random_seed(seed=None, device='cuda')", lambda seed=None, device="cuda": None),
    Form("sync_random_seed(group=None)", lambda group=None: None))


def sync_random_seed(*args, **kwargs) -> int:
    """Rank 0's random seed on every rank. mmengine's form
    ``sync_random_seed(group=None)``, as mmengine's: every rank draws from
    numpy; world size 1 returns that draw, otherwise rank 0's, as an int32
    ``torch.tensor`` (0 elsewhere), is broadcast from the group's rank 0 (the
    one broadcast of int32 x1 the library's dk_group_sync_random_seed makes,
    so ranks in other languages calling that take part). The seed's (mmdet's) form
    ``sync_random_seed(seed=None, device='cuda')``: an int ``seed`` is
    rank 0's value, broadcast (None: drawn as above); ``device`` is where
    the value travels, the comm device here."""
    first = args[0] if args else None
    seed_form = ("seed" in kwargs or "device" in kwargs
                 or (isinstance(first, int) and not isinstance(first, bool)))
    _, a = choose("sync_random_seed", *_SEED_FORMS, args, kwargs, seed_form)
    group = None if seed_form else a["group"]
    given = a.get("seed") if seed_form else None
    if given is None:
        seed = int(np.random.randint(2**31))
        if get_world_size(group) == 1:
            return seed
        value = torch.tensor(seed if get_rank(group) == 0 else 0, dtype=torch.int32)
        broadcast(value, get_global_rank(group, 0), group)
        return int(value.item())
    if get_world_size(group) == 1:
        return int(given)
    # The same broadcast as the drawn form's (int32 x1, mmdet's dtype), so
    # ranks that pass a seed and ranks that do not (or call the library's
    # dk_group_sync_random_seed) meet in one call.
    # (A seed past int32 travels wrapped, as a C int32_t would, and comes
    # back as its low 32 bits: raising on rank 0 alone would leave the
    # others in the broadcast.)
    mine = (int(given) + 2**31) % 2**32 - 2**31 if get_rank(group) == 0 else 0
    value = torch.tensor(mine, dtype=torch.int32)
    broadcast(value, get_global_rank(group, 0), group)
    return int(value.item()) & 0xFFFFFFFF  # a seed in [2^31, 2^32) comes back whole


@fail_together(group_at(2))
def all_reduce_dict(data: dict, op: str = "mean", group: Optional[ProcessGroup] = None,
                    to_float: bool = True) -> dict:
    """Reduces every value of ``data`` (the same keys, shapes and dtypes on
    every rank) in one all_reduce. The seed's defaults: ``op='mean'`` (mmengine's
    is 'sum') and ``to_float=True`` (mmdet's: values are cast to float32 for
    the reduction and back to their dtype after). The values are replaced
    by new tensors, as mmengine does, and the dict is returned, as mmdet's
    form is used."""
    assert isinstance(data, dict), "all_reduce_dict only supports dict type"
    if get_world_size(group) > 1:
        keys = sorted(data.keys())
        tensor_shapes = [data[k].shape for k in keys]
        tensor_numels = [data[k].numel() for k in keys]
        dtypes = [data[k].dtype for k in keys]
        parts = [data[k].flatten() for k in keys]
        if to_float:
            parts = [p.float() for p in parts]
        flatten_tensor = torch.cat(parts)
        all_reduce(flatten_tensor, op=op, group=group)
        split_tensors = [x.reshape(shape) for x, shape in
                         zip(torch.split(flatten_tensor, tensor_numels), tensor_shapes)]
        for k, v, dtype in zip(keys, split_tensors, dtypes):
            data[k] = v.to(dtype) if to_float else v
    return data


@fail_together(group_at(4))
def all_reduce_params(params, coalesce: bool = True, bucket_size_mb: int = -1, op: str = "sum",
                      group: Optional[ProcessGroup] = None) -> None:
    if get_world_size(group) == 1:
        return
    params_data = [param.data for param in params]
    code = _op_code(op)
    # Any layout, as mmengine's flattening takes: a parameter that is not
    # contiguous (channels_last, transposed) goes as a contiguous copy,
    # written back after (the elements in logical order on every rank).
    lent = [t if t.is_contiguous() else t.contiguous() for t in params_data]
    views = [Borrowed(t) for t in lent]
    array = _lib.tensor_array(views)
    call_collective(lib.dk_group_all_reduce_coalesced, handle_of(group), array, len(views), code,
                    1 if coalesce else 0, bucket_size_mb)
    for t, copy in zip(params_data, lent):
        if copy is not t:
            t.copy_(copy)
