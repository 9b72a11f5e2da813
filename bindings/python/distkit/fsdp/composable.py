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
    this module's forward and backward (its floating-point inputs cast to
    that unit's param_dtype where the unit's policy casts forward inputs);
    so is a module object an earlier call sharded that is reachable here
    under another parent (T5's embed_tokens in the encoder and the
    decoder). Such uses may nest (an alias module's forward around or inside
    the unit's own): the unit reshards after the outermost. Collective."""
    found = []
    found_ids = set()
    for sub in module.modules():
        c = getattr(sub, "_dk_fsdp", None)
        if c is not None and id(c) not in found_ids:
            found_ids.add(id(c))
            found.append(c)
    # One coordinator for every unit under `module`: the earlier calls'
    # are merged into one (Coordinator.absorb).
    coordinator = found[0] if found else Coordinator(free_after_backward=True)
    for c in found[1:]:
        coordinator.absorb(c)
    claimed = {id(p) for p in ignored_params or []}
    # Parameters an earlier call's unit holds, registered here too (tied
    # weights sharded by separate calls): more places of that unit.
    _share_held(module, claimed)
    # What the submodules' calls took, and their shards.
    claimed.update(coordinator.flat_ids)
    for unit in coordinator.units:
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
        # The unit's input cast, for the modules later calls find holding
        # its full parameters (_hook_alias).
        unit.cast_dtype = (param_dtype if mp_policy is not None and mp_policy.cast_forward_inputs
                           else None)
        for owner, _, _ in list(unit.owned) + list(unit.aliases):
            places = owner.__dict__.setdefault("_dk_places_of", [])
            if all(u is not unit for _, u in places):
                places.append((coordinator, unit))
    for sub in module.modules():  # the earlier calls' modules run on it too
        if "_dk_fsdp" in sub.__dict__:
            sub._dk_fsdp = coordinator
    module._dk_fsdp = coordinator
    coordinator.order_by_tree(module)
    if mp_policy is not None and mp_policy.param_dtype is not None and mp_policy.cast_forward_inputs:
        module.register_forward_pre_hook(
            lambda m, args: cast_inputs(mp_policy.param_dtype, args, {})[0])
    if not isinstance(module, FSDPModule):
        module.__class__ = _fsdp_class(type(module))
    return module


def _fsdp_class(cls: type) -> type:
    """`cls` as an FSDPModule, its forward run by the coordinator (which
    cleans up after one that raises: Coordinator.run_forward)."""
    def forward(self, *args, **kwargs):
        return self._dk_fsdp.run_forward(lambda: cls.forward(self, *args, **kwargs))
    return type(f"FSDP{cls.__name__}", (FSDPModule, cls), {"forward": forward})


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
            _hook_alias(sub, coordinator, unit)
    # A module holding places of an earlier call's unit (its parameters no
    # longer in _parameters), reachable here other than through the module
    # that call sharded: one module object shared by two parents (T5's and
    # BART's embed_tokens, in the encoder and the decoder), its unit's
    # module one of them. Its forward from here runs outside the unit's
    # module: it gathers the unit as an alias place does. (Without, it
    # computed with the freed full parameters.) Modules an earlier call
    # sharded are not entered: that call hooked what it reached.
    stack = [module]
    while stack:
        sub = stack.pop()
        for coordinator, unit in sub.__dict__.get("_dk_places_of", ()):
            if unit.module is not sub:
                _hook_alias(sub, coordinator, unit)
        stack.extend(child for child in sub._modules.values()
                     if child is not None and "_dk_fsdp" not in child.__dict__)


def _hook_alias(sub: nn.Module, coordinator, unit) -> None:
    """`sub` computes with `unit`'s full parameters outside the unit's
    module: its forward gathers the unit (and casts its floating-point
    inputs to the unit's param_dtype where the unit's policy casts), its
    backward gathers it again; once per (module, unit). Nested inside the
    unit's module's forward or around it, the outermost of them reshards."""
    users = sub.__dict__.setdefault("_dk_shared_units", [])
    if any(u is unit for u in users):
        return
    users.append(unit)
    cast = getattr(unit, "cast_dtype", None)
    if cast is not None:
        sub.register_forward_pre_hook(lambda m, args: cast_inputs(cast, args, {})[0])
    # unit.coordinator: the one that holds the unit now (Coordinator.absorb).
    sub.register_forward_pre_hook(lambda m, inputs, unit=unit: unit.coordinator._pre_forward(unit))
    sub.register_forward_hook(
        lambda m, inputs, output, unit=unit: unit.coordinator._post_forward(unit, output))
