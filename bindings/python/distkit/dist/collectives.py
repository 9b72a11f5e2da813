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


def _dense(t):
    """``t``, or a contiguous copy of a tensor that is not (a transposed or
    sliced view): the library reads only dense memory, and torch's Gloo takes
    any layout. In-place callers copy the result back."""
    return t if not isinstance(t, torch.Tensor) or t.is_contiguous() else t.contiguous()


def _real(t):
    """A complex tensor's float view (torch.view_as_real: a trailing pair of
    real and imaginary parts, sharing its memory): the library has no complex
    dtype, and element-wise collectives treat each part alone, as torch does."""
    return torch.view_as_real(t) if isinstance(t, torch.Tensor) and t.is_complex() else t


def _real_for(name: str, data, op: str):
    """``_real(data)`` for a reduction: only sum and mean add complex numbers
    part by part; the others raise as torch.distributed does."""
    if isinstance(data, torch.Tensor) and data.is_complex() and op.lower() not in ("sum", "mean"):
        raise RuntimeError(f"{name} does not support {op} on complex tensors")
    return _real(data)


def _stacked(data, world_size: int):
    """An empty buffer for ``world_size`` values like ``data`` (a tensor on
    its device, or a numpy array), stacked along a new first dimension."""
    shape = (world_size,) + tuple(data.shape)
    if isinstance(data, np.ndarray):
        return np.empty(shape, dtype=data.dtype)
    return torch.empty(shape, dtype=data.dtype, device=data.device)


def _contiguous_input(data):
    """``data`` as the library reads it: dense, numpy arrays included."""
    return np.ascontiguousarray(data) if isinstance(data, np.ndarray) else _dense(data)


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
    data = _real_for("all_reduce", data, op)  # complex: a view, results land in the caller's
    if _on_cpu_comm_device(data, group):
        lent = _dense(data)
        view = Borrowed(lent)
        return _run(lib.dk_group_all_reduce, (handle_of(group), view.pointer, code), async_op,
                    [view, lent, data], None if lent is data else lambda: data.copy_(lent))
    data_on_device, input_device = on_comm_device(data, group)
    data_on_device = _dense(data_on_device)  # a copy back_to_input writes back
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
    data = _real_for("reduce", data, op)
    data_on_device, input_device = on_comm_device(data, group)
    data_on_device = _dense(data_on_device)
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
    data_on_device, _ = on_comm_device(_real(tensor), group)
    out = _stacked(data_on_device, world_size)
    a_view, b_view = Borrowed(data_on_device.contiguous()), Borrowed(out)

    def fill():
        for slot, value in zip(tensor_list, out.unbind(0)):
            _real(slot).copy_(value)
    return _run(lib.dk_group_all_gather, (handle_of(group), a_view.pointer, b_view.pointer),
                a["async_op"], [a_view, b_view, out], fill)


def _all_gather(data, group) -> list:
    world_size = get_world_size(group)
    if world_size == 1:
        return [data]
    if isinstance(data, torch.Tensor) and data.is_complex():
        return [torch.view_as_complex(t) for t in _all_gather(torch.view_as_real(data), group)]
    data_on_device, input_device = on_comm_device(data, group)
    out = _stacked(data_on_device, world_size)
    a, b = Borrowed(_contiguous_input(data_on_device)), Borrowed(out)
    call_collective(lib.dk_group_all_gather, handle_of(group), a.pointer, b.pointer, None)
    if input_device is None:  # numpy
        return list(out)
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
    data_on_device, _ = on_comm_device(_real(tensor), group)
    data_on_device = data_on_device.contiguous()
    out = _stacked(data_on_device, world_size) if is_dst else None
    a_view = Borrowed(data_on_device)
    b_view = Borrowed(out) if out is not None else None

    def fill():
        if is_dst:
            for slot, value in zip(gather_list, out.unbind(0)):
                _real(slot).copy_(value)
    return _run(lib.dk_group_gather, (handle_of(group), a_view.pointer,
                                      b_view.pointer if b_view else None, root),
                a["async_op"], [a_view, b_view, out, data_on_device], fill)


def _gather(data, dst: int, group) -> list:
    world_size = get_world_size(group)
    if world_size == 1:
        return [data]
    if isinstance(data, torch.Tensor) and data.is_complex():
        return [torch.view_as_complex(t) for t in _gather(torch.view_as_real(data), dst, group)]
    root = get_group_rank(group, dst)
    is_dst = get_rank(group) == root
    data_on_device, input_device = on_comm_device(data, group)
    out = _stacked(data_on_device, world_size) if is_dst else None
    a = Borrowed(_contiguous_input(data_on_device))
    b = Borrowed(out) if out is not None else None
    call_collective(lib.dk_group_gather, handle_of(group), a.pointer, b.pointer if b else None,
                    root, None)
    if not is_dst:
        return []
    if input_device is None:  # numpy
        return list(out)
    return [t.to(input_device) for t in out.unbind(0)]


@fail_together(group_at(2))
def broadcast(data, src: int = 0, group: Optional[ProcessGroup] = None, async_op: bool = False):
    """In place, from ``src`` (a global rank, as in torch)."""
    if get_world_size(group) == 1:
        return Work(None) if async_op else None
    root = get_group_rank(group, src)
    data = _real(data)  # complex: a view, the result lands in the caller's
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
    seed = a.get("seed") if seed_form else None
    if seed is None:
        seed = int(np.random.randint(2**31))
    if get_world_size(group) == 1:
        return seed
    return _sync_random_seed(seed, group)


@fail_together(lambda args, kwargs: args[1])
def _sync_random_seed(seed: int, group) -> int:
    """Rank 0's ``seed`` as mmengine and mmdet send it: an int32 tensor (0
    elsewhere), broadcast, its ``.item()`` returned, so a negative seed stays
    negative. Every form makes this one broadcast (int32 x1), so ranks that
    pass a seed, ranks that draw one and ranks in other languages calling
    dk_group_sync_random_seed meet in one call. A seed past int32 is refused
    by ``torch.tensor`` on rank 0, as in mmdet, and the peers are told."""
    value = torch.tensor(seed if get_rank(group) == 0 else 0, dtype=torch.int32)
    broadcast(value, get_global_rank(group, 0), group)
    return int(value.item())


_DICT_FORMS = (
    Form("all_reduce_dict(py_dict, op='mean', group=None, to_float=True)",
         lambda py_dict, op="mean", group=None, to_float=True: None),
    # mmengine's op default is 'sum'; the seed's 'mean' wins.
    Form("all_reduce_dict(data, op='mean', group=None)", lambda data, op="mean", group=None: None))


@fail_together(group_at(2))
def all_reduce_dict(*args, **kwargs) -> dict:
    """Reduces every value of a dict (the same keys, shapes and dtypes on
    every rank) in one all_reduce. The seed's (mmdet's) form
    ``all_reduce_dict(py_dict, op='mean', group=None, to_float=True)``:
    ``to_float`` reduces float32 copies and the results stay float32, as in
    mmdet. mmengine's form ``all_reduce_dict(data, op, group=None)``
    (``data=``) reduces the values in their own dtypes (int64 stays exact).
    A call naming neither keyword is the seed's. The values are replaced by
    new tensors, as mmengine does, and the dict is returned, as mmdet's
    form is used."""
    seed, a = choose("all_reduce_dict", *_DICT_FORMS, args, kwargs, "data" not in kwargs)
    data, op, group = a["py_dict" if seed else "data"], a["op"], a["group"]
    assert isinstance(data, dict), "all_reduce_dict only supports dict type"
    if get_world_size(group) > 1:
        keys = sorted(data.keys())
        tensor_shapes = [data[k].shape for k in keys]
        tensor_numels = [data[k].numel() for k in keys]
        parts = [data[k].flatten() for k in keys]
        if seed and a["to_float"]:
            parts = [p.float() for p in parts]
        flatten_tensor = torch.cat(parts)
        all_reduce(flatten_tensor, op=op, group=group)
        split_tensors = [x.reshape(shape) for x, shape in
                         zip(torch.split(flatten_tensor, tensor_numels), tensor_shapes)]
        data.update(zip(keys, split_tensors))
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
