"""modelopt.torch.utils.distributed, on distkit. backend() is the string
"torch" when initialized, exactly as in modelopt. Groups are those
distkit.dist hands out: torch's own once torch.distributed is initialized
(see distkit.dist.groups), so modelopt code that passes them to
torch.distributed works too."""
import contextlib
import datetime
import functools
import importlib
import io
import os
import sys
import time
import traceback
import warnings
from typing import Any, Callable, Dict, List, Optional, Union

import torch

from . import dist
from .dist import torch_groups

__all__ = [
    "DistributedProcessGroup", "ParallelState", "backend", "barrier", "fsdp2_wrap", "is_available",
    "is_fsdp2_model", "is_initialized", "is_master", "rank", "size",
]  # modelopt's; its other public names (setup, cleanup, abort, broadcast_state_dict,
#    FileLock, is_dtensor_sharded, get_group, ...) are here too, outside __all__ as there.


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


def _serialize(obj: Any) -> torch.Tensor:
    """``obj`` as torch.save writes it, in a uint8 tensor (a torch.ByteTensor,
    as modelopt's)."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)


def _deserialize(tensor: Union[torch.Tensor, bytes], size: Optional[int] = None) -> Any:
    """What ``_serialize`` wrote; ``size``: its first bytes only (padding after)."""
    data = tensor if isinstance(tensor, (bytes, bytearray)) else tensor.cpu().numpy().tobytes()
    if size is not None:
        data = data[:size]
    return torch.load(io.BytesIO(data), weights_only=False)


def _payload(obj: Any) -> bytes:
    return _serialize(obj).numpy().tobytes()


def broadcast(obj: Any, src: int = 0, group=None) -> Any:
    """Broadcasts a torch.save-able object from ``src``."""
    if size() == 1:
        return obj
    items = [_payload(obj)] if rank() == src else []  # src: a global rank, as in torch
    dist.broadcast_object_list(items, src, group)  # pickled bytes of the torch.save payload
    return obj if rank() == src else _deserialize(items[0])


def allgather(obj: Any, group=None) -> List[Any]:
    if size(group) == 1:
        return [obj]
    return [_deserialize(b) for b in dist.all_gather_object(_payload(obj), group=group)]


def allreduce(obj: Any, reduction: str = "sum", group=None) -> Any:
    objs = allgather(obj, group)
    if reduction == "sum":
        return sum(objs)
    raise NotImplementedError(reduction)


def master_only(func):
    """Runs ``func`` on the master and broadcasts its return value to every rank."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        value = func(*args, **kwargs) if is_master() else None
        return broadcast(value)

    return wrapper


def setup(timeout: Optional[datetime.timedelta] = None) -> None:
    """modelopt's setup: this rank's CUDA device is its LOCAL_RANK, then,
    unless torch.distributed is initialized already, the job joined from
    the launcher's environment with modelopt's backend "cpu:gloo,cuda:nccl"
    (distkit's init_dist, which also initializes torch.distributed on
    distkit). Where CUDA is not usable (modelopt's would fail), Gloo alone."""
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(local_rank())
    if not is_initialized():
        kwargs = {} if timeout is None else {"timeout": timeout.total_seconds()}
        dist.init_dist("pytorch", backend="cpu:gloo,cuda:nccl" if cuda else "gloo", **kwargs)


def cleanup() -> None:
    """modelopt's cleanup: a barrier (its errors ignored) unless an exception
    other than SystemExit is being handled, since peers may wait in a
    collective this rank never reaches; then the job is left
    (torch.distributed's default group destroyed)."""
    if not is_initialized():
        return
    exception = sys.exc_info()[1]
    if exception is None or isinstance(exception, SystemExit):
        with contextlib.suppress(Exception):
            barrier()
    dist.destroy()
    tdist = sys.modules.get("torch.distributed")
    if tdist is not None and tdist.is_initialized():  # user code initialized it
        tdist.destroy_process_group()


def abort(exit_code: int = 1) -> None:
    """modelopt's abort, for an ``except`` block: prints the exception being
    handled and ends this process at once (``os._exit``), so the launcher
    stops the peers instead of the job hanging in a barrier or destroy. A
    SystemExit being handled is raised again instead."""
    exception = sys.exc_info()[1]
    if isinstance(exception, SystemExit):
        raise exception
    traceback.print_exc()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(exit_code)


def broadcast_state_dict(state_dict_or_none: Optional[Dict[str, torch.Tensor]], src: int,
                         device: torch.device, pg=None) -> Dict[str, torch.Tensor]:
    """modelopt's: rank ``src`` (a global rank) passes a dict of tensors, the
    others None; every rank gets the dict on ``device``. The names, shapes
    and dtypes travel first (broadcast_object_list), then each tensor
    (broadcast)."""
    is_src = dist.get_rank() == src
    meta: List[Any] = [None]
    if is_src and state_dict_or_none is not None:
        meta = [{name: (tuple(t.shape), t.dtype) for name, t in state_dict_or_none.items()}]
    dist.broadcast_object_list(meta, src=src, group=pg)
    names = meta[0]
    assert names is not None, f"src rank {src} passed no state dict to broadcast"
    source = state_dict_or_none or {}
    out: Dict[str, torch.Tensor] = {}
    for name, (shape, dtype) in names.items():
        if is_src:
            tensor = source[name].to(device)
        else:
            tensor = torch.empty(shape, dtype=dtype, device=device)
        dist.broadcast(tensor, src=src, group=pg)
        out[name] = tensor
    return out


def _dtensor_type():
    """torch's DTensor class, or None where this torch has none (1.13)."""
    for module in ("torch.distributed.tensor", "torch.distributed._tensor"):
        try:
            return importlib.import_module(module).DTensor
        except (ImportError, AttributeError):
            continue
    return None


def is_dtensor_sharded(model: torch.nn.Module) -> bool:
    """Whether any parameter or buffer of ``model`` is a torch DTensor (False
    where torch has no DTensor)."""
    dtensor = _dtensor_type()
    if dtensor is None:
        return False
    return any(isinstance(t, dtensor) for t in list(model.parameters()) + list(model.buffers()))


class FileLock:
    """modelopt's lock file, for writing a file from one process: entering
    creates ``lockfile_path`` exclusively (O_CREAT | O_EXCL). If it exists,
    ``all_acquire=True`` waits (polling every ``poll_time`` seconds) until it
    is gone and tries again; ``all_acquire=False`` goes on without the lock.
    Leaving removes the file."""

    def __init__(self, lockfile_path: str, all_acquire: bool = False, poll_time: float = 0.25):
        self.lockfile_path = lockfile_path
        self.all_acquire = all_acquire
        self.poll_time = poll_time
        self.handle: Optional[int] = None

    def try_acquire(self) -> bool:
        try:
            self.handle = os.open(self.lockfile_path, os.O_CREAT | os.O_EXCL)
        except FileExistsError:
            return False
        return True

    def wait(self) -> None:
        while os.path.exists(self.lockfile_path):
            time.sleep(self.poll_time)

    def release(self) -> None:
        if self.handle is not None:
            os.close(self.handle)
        os.remove(self.lockfile_path)

    def __enter__(self) -> "FileLock":
        while not self.try_acquire() and self.all_acquire:
            self.wait()
        return self

    def __exit__(self, exc_type, exc_value, tb) -> None:
        self.release()


def _unused(group) -> bool:
    """modelopt's ``group == -1`` (a torch group does not compare to an int)."""
    return isinstance(group, int) and not isinstance(group, bool) and group == -1


def _group_text(group) -> str:
    """A group as dk_parallel_state_describe writes it in C and C++: its
    name, "None" for the world, "-1" for unused; a torch group without a
    distkit twin (yet) as torch prints it, as in modelopt."""
    if group is None or _unused(group):
        return str(group)
    if isinstance(group, dist.ProcessGroup):
        return group.name()
    twin = torch_groups.twin(group)  # a table lookup, no collective
    return twin.name() if isinstance(twin, dist.ProcessGroup) else str(group)


class DistributedProcessGroup:
    """A group, the world (None) or unused (-1). As modelopt's, construction
    only stores the group, and rank, size and text are read at each call
    (local: torch answers for torch's groups, the library for distkit's),
    so it can be made on some ranks only, before the job is initialized,
    or on a group this rank is not in (rank and size -1 there, as torch
    says)."""

    def __init__(self, group: Union[dist.ProcessGroup, int, None] = None):
        self.group = group

    def is_initialized(self) -> bool:
        return backend() == "torch" and not _unused(self.group)

    def rank(self) -> int:
        return rank(self.group) if self.is_initialized() else -1

    def world_size(self) -> int:
        return size(self.group) if self.is_initialized() else -1

    def __repr__(self) -> str:
        return (f"group: {_group_text(self.group)}, initialized: {self.is_initialized()}, "
                f"world size: {self.world_size()}")

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
        self.data_parallel_group = DistributedProcessGroup(data_parallel_group)
        self.tensor_parallel_group = DistributedProcessGroup(tensor_parallel_group)
        self.expert_model_parallel_group = DistributedProcessGroup(expert_model_parallel_group)

    def __repr__(self) -> str:
        return (f"data_parallel_group: {self.data_parallel_group}, "
                f"tensor_parallel_group: {self.tensor_parallel_group}, "
                f"expert_model_parallel_group: {self.expert_model_parallel_group}")


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
