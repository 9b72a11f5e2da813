"""modelopt.torch.utils.distributed, on distkit. backend() is the string
"torch" when initialized, exactly as in modelopt."""
import ctypes
import io
import os
import warnings
from typing import Any, Callable, List, Optional, Union

import torch

from . import _lib, dist
from ._lib import check, lib, take_string

__all__ = [
    "DistributedProcessGroup", "ParallelState", "backend", "barrier", "is_available",
    "is_initialized", "is_master", "rank", "size",
]


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return is_available() and dist.is_distributed()


def backend() -> Optional[str]:
    return "torch" if is_initialized() else None


def size(group=None) -> int:
    return dist.get_world_size(group) if backend() == "torch" else 1


def rank(group=None) -> int:
    return dist.get_rank(group) if backend() == "torch" else 0


def local_rank() -> int:
    if "LOCAL_RANK" in os.environ:
        return int(os.environ["LOCAL_RANK"])
    warnings.warn("LOCAL_RANK environment variable not found. Using global rank instead.")
    return rank()


def is_master(group=None) -> bool:
    return rank(group) == 0


def is_last_process(group=None) -> bool:
    return rank(group) == size(group) - 1


def barrier(group=None) -> None:
    if size() == 1:
        return
    dist.barrier(group)


def _serialize(obj: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def _deserialize(data: bytes) -> Any:
    return torch.load(io.BytesIO(data))


def broadcast(obj: Any, src: int = 0, group=None) -> Any:
    """Broadcasts a torch.save-able object from ``src``."""
    if size() == 1:
        return obj
    items = [_serialize(obj)] if rank(group) == src else []
    dist.broadcast_object_list(items, src, group)  # pickled bytes of the torch.save payload
    return _deserialize(items[0])


def allgather(obj: Any, group=None) -> List[Any]:
    if size() == 1:
        return [obj]
    return [_deserialize(b) for b in dist.all_gather_object(_serialize(obj), group)]


def allreduce(obj: Any, reduction: str = "sum", group=None) -> Any:
    objs = allgather(obj, group)
    if reduction == "sum":
        return sum(objs)
    raise NotImplementedError(reduction)


def master_only(func):
    """Runs ``func`` on the master and broadcasts its return value to every rank."""

    def wrapper(*args, **kwargs):
        value = func(*args, **kwargs) if is_master() else None
        return broadcast(value)

    return wrapper


def _group_arg(group):
    """The dk_group_t* for a modelopt group: None is the world (NULL), -1 is
    "unused" (DK_GROUP_UNUSED), else a distkit ProcessGroup."""
    if group is None:
        return None
    if isinstance(group, int) and group == -1:
        return _lib.GROUP_UNUSED
    return dist.groups.handle_of(group)


class _State:
    """Owns one dk_parallel_state_t."""

    def __init__(self, data_parallel, tensor_parallel, expert_parallel):
        self.handle = ctypes.c_void_p()
        check(lib.dk_parallel_state_create, _group_arg(data_parallel), _group_arg(tensor_parallel),
              _group_arg(expert_parallel), ctypes.byref(self.handle))

    def __del__(self):
        if getattr(self, "handle", None):
            lib.dk_parallel_state_destroy(self.handle)
            self.handle = None

    def describe(self) -> str:
        out = ctypes.c_void_p()
        check(lib.dk_parallel_state_describe, self.handle, ctypes.byref(out))
        return take_string(out)


_LABELS = ("data_parallel_group: ", ", tensor_parallel_group: ", ", expert_model_parallel_group: ")


class DistributedProcessGroup:
    """A group, the world (None) or unused (-1). Rank, size and text come from
    the library's ParallelState (dk_parallel_state_*), as in C and C++."""

    def __init__(self, group: Union[dist.ProcessGroup, int, None] = None, *,
                 _state: Optional[_State] = None, _which: int = _lib.PARALLEL_DATA):
        self.group = group
        self._state = _state if _state is not None else _State(group, -1, -1)
        self._which = _which

    def is_initialized(self) -> bool:
        return backend() == "torch" and self.group != -1

    def rank(self) -> int:
        return lib.dk_parallel_state_rank(self._state.handle, self._which)

    def world_size(self) -> int:
        return lib.dk_parallel_state_size(self._state.handle, self._which)

    def __repr__(self) -> str:
        text = self._state.describe()
        begin = text.index(_LABELS[self._which]) + len(_LABELS[self._which])
        following = _LABELS[self._which + 1] if self._which + 1 < len(_LABELS) else None
        return text[begin:text.index(following)] if following else text[begin:]

    @staticmethod
    def get_dist_syncd_obj(obj: Any, groups: Union["DistributedProcessGroup",
                                                   List["DistributedProcessGroup"]],
                           op: Callable[[List[Any]], Any]) -> Any:
        if not isinstance(groups, list):
            groups = [groups]
        for group in groups:
            if not group.is_initialized():
                continue
            obj = op(dist.all_gather_object(obj, group=group.group))
        return obj


class ParallelState:
    """The data, tensor and expert parallel groups (-1: unused; None: the world)."""

    def __init__(self, data_parallel_group=None, tensor_parallel_group=-1,
                 expert_model_parallel_group=-1):
        self._state = _State(data_parallel_group, tensor_parallel_group,
                             expert_model_parallel_group)
        self.data_parallel_group = DistributedProcessGroup(
            data_parallel_group, _state=self._state, _which=_lib.PARALLEL_DATA)
        self.tensor_parallel_group = DistributedProcessGroup(
            tensor_parallel_group, _state=self._state, _which=_lib.PARALLEL_TENSOR)
        self.expert_model_parallel_group = DistributedProcessGroup(
            expert_model_parallel_group, _state=self._state, _which=_lib.PARALLEL_EXPERT)

    def __repr__(self) -> str:
        return self._state.describe()


def get_group(ranks: List[int]):
    return dist.new_group(ranks) if is_initialized() else None
