"""modelopt.torch.utils.distributed, on distkit. backend() is the string
"torch" when initialized, exactly as in modelopt."""
import ctypes
import io
import os
import warnings
from typing import Any, Callable, List, Optional, Union

import torch

from . import _lib, dist
from ._lib import lib, raise_for_status, take_string

__all__ = [
    "DistributedProcessGroup", "ParallelState", "backend", "barrier", "fsdp2_wrap", "is_available",
    "is_fsdp2_model", "is_initialized", "is_master", "rank", "size",
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
    items = [_serialize(obj)] if rank() == src else []  # src: a global rank, as in torch
    dist.broadcast_object_list(items, src, group)  # pickled bytes of the torch.save payload
    return _deserialize(items[0])


def allgather(obj: Any, group=None) -> List[Any]:
    if size() == 1:
        return [obj]
    return [_deserialize(b) for b in dist.all_gather_object(_serialize(obj), group=group)]


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
        return dist.groups.handle_of(None)  # joins a torch-initialized job
    if isinstance(group, int) and group == -1:
        return _lib.GROUP_UNUSED
    return dist.groups.handle_of(group)


class _State:
    """Owns one dk_parallel_state_t."""

    def __init__(self, data_parallel, tensor_parallel, expert_parallel):
        self.handle = ctypes.c_void_p()
        raise_for_status(lib.dk_parallel_state_create, _group_arg(data_parallel),
                         _group_arg(tensor_parallel), _group_arg(expert_parallel),
                         ctypes.byref(self.handle))

    def __del__(self):
        if getattr(self, "handle", None):
            lib.dk_parallel_state_destroy(self.handle)
            self.handle = None

    def describe(self) -> str:
        out = ctypes.c_void_p()
        raise_for_status(lib.dk_parallel_state_describe, self.handle, ctypes.byref(out))
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


# ---- FSDP2 (distkit.fsdp.fully_shard) ---------------------------------------------------


def is_fsdp2_model(model: torch.nn.Module) -> bool:
    """Whether any submodule was sharded with fully_shard."""
    from .fsdp import FSDPModule

    return any(isinstance(m, FSDPModule) for m in model.modules())


def _is_hf_model(model) -> bool:
    """modelopt requires a transformers PreTrainedModel or a peft PeftModel;
    where neither library is installed, a module with a ``config`` (the HF
    layout) counts."""
    kinds = []
    try:
        from transformers import PreTrainedModel
        kinds.append(PreTrainedModel)
    except ImportError:
        pass
    try:
        from peft import PeftModel
        kinds.append(PeftModel)
    except ImportError:
        pass
    if kinds:
        return isinstance(model, tuple(kinds))
    return isinstance(model, torch.nn.Module) and hasattr(model, "config")


def _nemotron_h_layers(model):
    for owner in ("backbone", "model"):
        layers = getattr(getattr(model, owner, None), "layers", None)
        if layers is not None and len(layers) > 0 and hasattr(layers[0], "block_type"):
            return layers
    return None


def _homogeneous_layers(model):
    decoder = getattr(model, "model", None)
    if decoder is None:
        return None
    decoder = getattr(decoder, "language_model", decoder)
    layers = getattr(decoder, "layers", None)
    if layers is None or len(layers) == 0 or len({type(l) for l in layers}) != 1:
        return None
    return layers


def _plain_layers(model):
    """GPT-2's ``transformer.h`` and a bare ``layers`` list."""
    for path in (("transformer", "h"), ("layers",)):
        owner = model
        for name in path:
            owner = getattr(owner, name, None)
        if isinstance(owner, torch.nn.ModuleList) and len(owner) > 0 and \
                len({type(l) for l in owner}) == 1:
            return owner
    return None


# (predicate, discoverer) pairs; the first match wins (modelopt's order).
_DECODER_LAYER_FINDERS = [
    (lambda m: _is_hf_model(m) and _nemotron_h_layers(m) is not None, _nemotron_h_layers),
    (lambda m: _is_hf_model(m) and _nemotron_h_layers(m) is None and
     _homogeneous_layers(m) is not None, _homogeneous_layers),
    (lambda m: _is_hf_model(m) and _plain_layers(m) is not None, _plain_layers),
]


def get_decoder_layers(model):
    """The model's decoder layers, or None when no known layout matches."""
    for predicate, discover in _DECODER_LAYER_FINDERS:
        if predicate(model):
            return discover(model)
    return None


def _off_dtype_params(model) -> set:
    """Parameters whose dtype is not the dominant one (most elements)."""
    numel_by_dtype = {}
    for p in model.parameters():
        numel_by_dtype[p.dtype] = numel_by_dtype.get(p.dtype, 0) + p.numel()
    if len(numel_by_dtype) <= 1:
        return set()
    dominant = max(numel_by_dtype, key=lambda d: numel_by_dtype[d])
    off = {n: p for n, p in model.named_parameters() if p.dtype != dominant}
    off_numel = sum(v for d, v in numel_by_dtype.items() if d != dominant)
    names = sorted(off)
    if rank() == 0:
        warnings.warn(
            f"Model has mixed parameter dtypes {set(numel_by_dtype)}; FSDP2 needs one dtype per "
            f"shard group, so {len(names)} non-{dominant} parameter(s) "
            f"({100 * off_numel / sum(numel_by_dtype.values()):.2f}% of elements) will stay "
            f"replicated rather than sharded: {names[:3]}{' ...' if len(names) > 3 else ''}")
    return set(off.values())


def fsdp2_wrap(model, shard_root=True, mp_policy=None, cpu_offload: bool = False):
    """Auto-detects a HF causal-LM's decoder layers and shards each one with
    fully_shard (then the root, unless ``shard_root`` is False). Parameters
    whose dtype is not the dominant one stay replicated. Returns the layers."""
    from .fsdp import CPUOffloadPolicy, fully_shard

    layers = get_decoder_layers(model)
    if layers is None:
        raise RuntimeError("Could not auto-detect decoder layers; FSDP2 wrap requires a standard "
                           "HF causal-LM layout.")
    kwargs = {"reshard_after_forward": True}
    if mp_policy is not None:
        kwargs["mp_policy"] = mp_policy
    if cpu_offload:
        kwargs["offload_policy"] = CPUOffloadPolicy()
    ignored = _off_dtype_params(model)
    if ignored:
        kwargs["ignored_params"] = ignored
    config = getattr(model, "config", None)
    architectures = list(getattr(config, "architectures", []) or [])
    for layer in layers:
        fully_shard(layer, **kwargs)
    if shard_root:
        fully_shard(model, **kwargs)
    if config is not None and architectures:
        config.architectures = architectures
    return layers
