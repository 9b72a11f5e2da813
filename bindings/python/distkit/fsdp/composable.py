"""FSDP2's composable form: ``fully_shard`` shards a module in place, layer
by layer, and marks it an FSDPModule."""
from dataclasses import dataclass
from typing import Optional, Set

import torch
from torch import nn

from .options import ShardingStrategy, cast_inputs, shard_config
from .scheduling import Coordinator
from .wrap import other_places, unclaimed_params


class FSDPModule:
    """The mixin every module sharded by ``fully_shard`` carries (FSDP2's
    marker: ``isinstance(m, FSDPModule)``)."""


@dataclass
class MixedPrecisionPolicy:
    """FSDP2's mixed precision: gather and compute in ``param_dtype``, reduce
    gradients in ``reduce_dtype``."""
    param_dtype: Optional[torch.dtype] = None
    reduce_dtype: Optional[torch.dtype] = None
    output_dtype: Optional[torch.dtype] = None
    cast_forward_inputs: bool = True


@dataclass
class CPUOffloadPolicy:
    pin_memory: bool = True


def fully_shard(module: nn.Module, *, mesh=None, reshard_after_forward: bool = True,
                mp_policy: Optional[MixedPrecisionPolicy] = None,
                offload_policy: Optional[CPUOffloadPolicy] = None,
                ignored_params: Optional[Set[nn.Parameter]] = None) -> nn.Module:
    """FSDP2's ``fully_shard``: shards, in place, the parameters of ``module``
    that no ``fully_shard`` call on a submodule took, as one unit over
    ``mesh`` (a process group; default: the world). The module's class
    becomes a subclass of FSDPModule; its ``parameters()`` then include the
    unit's shards (what an optimizer steps). Call it on the layers first and
    on the root last. A parameter an earlier call's unit holds that is also
    registered here (tied weights, each user sharded by its own call) stays
    that unit's: its place here uses the unit's full parameter, gathered for
    this module's forward and backward. Collective."""
    found = []
    found_ids = set()
    for sub in module.modules():
        c = getattr(sub, "_dk_fsdp", None)
        if c is not None and id(c) not in found_ids:
            found_ids.add(id(c))
            found.append(c)
    coordinator = found[0] if found else Coordinator(free_after_backward=True)
    claimed = {id(p) for p in ignored_params or []}
    # Parameters an earlier call's unit holds, registered here too (tied
    # weights sharded by separate calls): more places of that unit.
    _share_held(module, claimed)
    for c in found:  # what the submodules' calls took, and their shards
        claimed.update(c.flat_ids)
        for unit in c.units:
            claimed.update(id(p) for _, _, p in unit.owned)
    owned = unclaimed_params(module, set(), claimed)
    param_dtype = mp_policy.param_dtype if mp_policy else None
    config = shard_config(ShardingStrategy.FULL_SHARD if reshard_after_forward
                          else ShardingStrategy.SHARD_GRAD_OP, param_dtype,
                          mp_policy.reduce_dtype if mp_policy else None,
                          offload_policy is not None, False, None)
    if owned:  # the unit registers its shards on the module
        # A parameter registered twice under `module` (tied weights) is held once.
        unit = coordinator.add(module, owned, mesh, config, param_dtype, reshard_after_forward,
                               False, aliases=other_places(module, set(), owned))
        for i, (_, _, p) in enumerate(owned):
            p._dk_fully_shard = (coordinator, unit, i)  # for later calls (_share_held)
    module._dk_fsdp = coordinator
    if mp_policy is not None and mp_policy.param_dtype is not None and mp_policy.cast_forward_inputs:
        module.register_forward_pre_hook(
            lambda m, args: cast_inputs(mp_policy.param_dtype, args, {})[0])
    if not isinstance(module, FSDPModule):
        module.__class__ = type(f"FSDP{type(module).__name__}", (FSDPModule, type(module)), {})
    return module


def _share_held(module: nn.Module, ignored: Set[int]) -> None:
    """A parameter that an earlier fully_shard call's unit holds and that is
    registered under `module` at a place outside that unit (a tied embedding
    and output projection sharded by separate calls, or one of them by its
    own call and the other by the root's): the place becomes one more place
    of the unit (the same full view and leaf, so one gradient summed over
    the uses, reduced once), and the place's module gathers the unit for its
    forward and backward as the unit's own module does. Left as it was, the
    place kept the original full Parameter: a second copy the optimizer
    stepped apart from the shard, with a gradient no one reduced."""
    for sub in module.modules():
        for name, p in list(sub._parameters.items()):
            held = getattr(p, "_dk_fully_shard", None) if p is not None else None
            if held is None or id(p) in ignored:
                continue
            coordinator, unit, i = held
            if unit.handle is None:
                continue
            unit.aliases.append((sub, name, i))
            del sub._parameters[name]
            leaf = unit.leaves[i]
            object.__setattr__(sub, name, leaf if leaf is not None else unit.views[i])
            users = sub.__dict__.setdefault("_dk_shared_units", [])
            if all(u is not unit for u in users):
                users.append(unit)
                sub.register_forward_pre_hook(
                    lambda m, inputs, unit=unit, c=coordinator: c._pre_forward(unit))
                sub.register_forward_hook(
                    lambda m, inputs, output, unit=unit, c=coordinator:
                    c._post_forward(unit, output))
