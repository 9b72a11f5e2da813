"""The sharded checkpoint format, shared with C++ (cc/torch/
fsdp_checkpoint_file.h; docs/architecture.md, "Sharded checkpoints"): one
file per rank of the shard group, ``<dir>/shard_rank<R>.pt``, a dict of CPU
tensors (torch.save here, torch::pickle_save in C++; each reads the other's)
under these keys:

  unit[<path>].meta     int64: world size, F, then per flat buffer its
                        dk_dtype_t code and element count (unpadded), then P
                        and each of the unit's P parameters' element counts,
                        then, only where some parameter is frozen (which
                        decides its flat buffer), P flags (1: frozen)
  unit[<path>].flat<k>  this rank's shard of the unit's flat buffer k
  param.<name>          a parameter no unit holds, whole
  buffer.<name>         a buffer, whole, in its own dtype

<path> is the unit's module path in the wrapped module ("" for the root:
``unit[].meta``). A sharded state dict (StateDictType.SHARDED_STATE_DICT)
is one rank's file contents."""
import os
from typing import Dict, List, Sequence, Tuple

import torch

from .options import DK_DTYPE

META = ".meta"


def unit_key(path: str, what: str) -> str:
    """``unit[<path>].<what>``: what is "meta" or "flat<k>"."""
    return f"unit[{path}].{what}"


def flat_key(path: str, k: int) -> str:
    return unit_key(path, f"flat{k}")


def meta_key(path: str) -> str:
    return unit_key(path, "meta")


def param_key(name: str) -> str:
    return f"param.{name}"


def buffer_key(name: str) -> str:
    return f"buffer.{name}"


def shard_file(directory: str, rank: int) -> str:
    return os.path.join(directory, f"shard_rank{rank}.pt")


def unit_paths(state: Dict[str, torch.Tensor]) -> List[str]:
    """The unit paths a sharded state dict holds, in its order."""
    return [k[len("unit["):-len("]" + META)] for k in state
            if k.startswith("unit[") and k.endswith("]" + META)]


def is_sharded(state) -> bool:
    return any(isinstance(k, str) and k.startswith("unit[") and k.endswith("]" + META)
               for k in state)


def encode_meta(world_size: int, flats: List[Tuple[torch.dtype, int]],
                param_numel: List[int], frozen: Sequence[bool] = ()) -> torch.Tensor:
    values = [world_size, len(flats)]
    for dtype, numel in flats:
        values += [DK_DTYPE[dtype], numel]
    values += [len(param_numel)] + list(param_numel)
    if any(frozen):
        values += [int(f) for f in frozen]
    return torch.tensor(values, dtype=torch.int64)


def decode_meta(t: torch.Tensor, key: str) -> Tuple[int, List[Tuple[int, int]], List[int],
                                                     List[bool]]:
    """(world size, [(dk_dtype_t code, numel)] per flat, parameter numels,
    per parameter whether it is frozen); ValueError naming `key` when it is
    malformed."""
    v = [int(x) for x in t.reshape(-1).tolist()]
    bad = ValueError(f"the checkpoint's {key} is malformed")
    if len(v) < 3 or v[1] < 0 or 2 + 2 * v[1] >= len(v):
        raise bad
    flats = [(v[2 + 2 * k], v[3 + 2 * k]) for k in range(v[1])]
    params = v[2 + 2 * v[1]]
    base = 3 + 2 * v[1]
    if params < 0 or len(v) not in (base + params, base + 2 * params):
        raise bad
    frozen = [bool(x) for x in v[base + params:]] or [False] * params
    return v[0], flats, v[base:base + params], frozen


def write(path: str, state: Dict[str, torch.Tensor]) -> None:
    """A plain dict of contiguous CPU tensors, which C++'s pickle_load reads."""
    torch.save({k: v.detach().to("cpu").contiguous().clone() for k, v in state.items()}, path)


def read(path: str) -> Dict[str, torch.Tensor]:
    if not os.path.exists(path):
        raise FileNotFoundError(f"cannot read the checkpoint file {path}")
    state = torch.load(path, map_location="cpu")
    if not isinstance(state, dict) or not is_sharded(state):
        raise ValueError(f"{path} is not a sharded checkpoint")
    return state
