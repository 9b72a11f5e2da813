"""torch's FSDP configuration types under torch's names (torch's own FSDP
cannot be imported on this platform), and how they become the library's
dk_shard_config_t."""
import ctypes
import enum
from dataclasses import dataclass
from typing import Optional

import torch

from .. import _lib, dist
from .._lib import lib


class ShardingStrategy(enum.Enum):
    FULL_SHARD = _lib.SHARD_FULL_SHARD
    SHARD_GRAD_OP = _lib.SHARD_SHARD_GRAD_OP
    NO_SHARD = _lib.SHARD_NO_SHARD
    HYBRID_SHARD = _lib.SHARD_HYBRID_SHARD
    _HYBRID_SHARD_ZERO2 = _lib.SHARD_HYBRID_SHARD_ZERO2


class BackwardPrefetch(enum.Enum):
    BACKWARD_PRE = enum.auto()
    BACKWARD_POST = enum.auto()


class StateDictType(enum.Enum):
    FULL_STATE_DICT = enum.auto()
    LOCAL_STATE_DICT = enum.auto()
    SHARDED_STATE_DICT = enum.auto()


@dataclass
class FullStateDictConfig:
    """torch's: under StateDictType.FULL_STATE_DICT, ``rank0_only`` keeps the
    full values on rank 0 alone (every rank still takes part in the gathers,
    one unit at a time; the others get an empty dict), ``offload_to_cpu``
    gives them in CPU memory."""
    offload_to_cpu: bool = False
    rank0_only: bool = False


@dataclass
class CPUOffload:
    offload_params: bool = False


@dataclass
class MixedPrecision:
    param_dtype: Optional[torch.dtype] = None
    reduce_dtype: Optional[torch.dtype] = None
    buffer_dtype: Optional[torch.dtype] = None


# The ABI's dk_dtype_t codes of the dtypes the library shards.
DK_DTYPE = {torch.float16: 0, torch.bfloat16: 1, torch.float32: 2, torch.float64: 3}
TORCH_DTYPE = {v: k for k, v in DK_DTYPE.items()}


def shard_config(strategy: ShardingStrategy, param_dtype, reduce_dtype, offload: bool,
                 sync_module_states: bool, replicate_group) -> "_lib.ShardConfig":
    config = _lib.ShardConfig()
    lib.dk_shard_config_init_sized(ctypes.byref(config), ctypes.sizeof(config))
    config.strategy = strategy.value
    config.param_dtype = DK_DTYPE[param_dtype] if param_dtype else _lib.DTYPE_UNSET
    config.reduce_dtype = DK_DTYPE[reduce_dtype] if reduce_dtype else _lib.DTYPE_UNSET
    config.offload_params = 1 if offload else 0
    config.sync_module_states = 1 if sync_module_states else 0
    config.replicate_group = dist.groups.handle_of(replicate_group)
    return config


def cast_inputs(dtype: torch.dtype, args, kwargs):
    """Mixed precision: floating-point inputs in the compute dtype."""
    cast = lambda x: x.to(dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x
    return tuple(cast(a) for a in args), {k: cast(v) for k, v in kwargs.items()}
