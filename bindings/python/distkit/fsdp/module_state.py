"""The wrapped module's own state dict (``model.module.state_dict()``) and
loads into it: what mmengine's Runner uses. Its checkpoint runs
``model.module.state_dict()`` on rank 0 alone, its ``_init_model_weights``
broadcasts every entry of it from rank 0 in place, and ``load_from`` /
``resume`` load a checkpoint into ``model.module`` on every rank. So:

- state_dict() is local and every FSDP-held entry is a copy, of the same
  shape on every rank (an in-place broadcast into it changes no shard): a
  unit split over ranks gives its flat shards (``<path>._flat_param``,
  ``_flat_param_<k>``); a unit that is whole on every rank (one rank,
  NO_SHARD) gives its parameters under their own keys, full, as the plain
  module would.
- load_state_dict() takes full parameters under their own keys (a
  full-parameter checkpoint, e.g. the wrapper's state_dict()): each rank
  keeps its part, no collective. A flat shard saved by a job whose units
  were split over ranks is one rank's part: refused with a RuntimeError
  before anything is loaded (raised, not an error message: mmengine's
  load_state_dict, strict=False, would only print one), never loaded into
  another rank's shard.
"""
from typing import List

import torch

from .unit import Unit, flat_param_name


def _flat_key(unit: Unit, k: int) -> str:
    return f"{unit.path}.{flat_param_name(k)}" if unit.path else flat_param_name(k)


def install(module: torch.nn.Module, units: List[Unit], orig_params: bool) -> None:
    """Hooks `module`'s state_dict and load_state_dict as above."""
    # A unit's module registered under further names: nn.Module's state
    # dict gives its flat shards there too.
    # (One walk for every unit: a walk per unit was quadratic.)
    paths: dict = {}
    for p, m in module.named_modules(remove_duplicate=False):
        paths.setdefault(id(m), []).append(p)
    other_paths = {id(u): [p for p in paths.get(id(u.module), []) if p != u.path]
                   for u in units}

    def other_flat_keys(unit: Unit) -> List[str]:
        return [f"{p}.{flat_param_name(k)}" for p in other_paths[id(unit)]
                for k in range(len(unit.flat_params))]

    def held(unit: Unit) -> List[str]:
        """The entries nn.Module.state_dict gives for what `unit` holds."""
        if orig_params:
            return list(unit.keys) + [key for key, _ in unit.alias_keys]
        return [_flat_key(unit, k) for k in range(len(unit.flat_params))] + \
            other_flat_keys(unit)

    def every_key(unit: Unit, values: List[torch.Tensor]) -> List[tuple]:
        """(key, value) under each key of the plain module's (a tied
        parameter's value under each of its names)."""
        return list(zip(unit.keys, values)) + [(key, values[i]) for key, i in unit.alias_keys]

    def full_values(unit: Unit) -> List[torch.Tensor]:
        return [unit.flat_params[k].detach()[off:off + n].view(shape).clone()
                for k, off, n, shape in unit.place]

    def after_state_dict(mod, state, prefix, local_metadata):
        for unit in units:
            for key in held(unit):
                state.pop(prefix + key, None)
            if unit.shard_count == 1:
                for key, value in every_key(unit, full_values(unit)):
                    state[prefix + key] = value
            else:
                for k, flat in enumerate(unit.flat_params):
                    state[prefix + _flat_key(unit, k)] = flat.detach().clone()
        return state

    def refuse_shards(state, prefix) -> None:
        """One rank's shards raise before anything is loaded (mmengine's
        load_state_dict, strict=False in the Runner's resume, would only
        print an error message, and training would go on from the wrong
        state)."""
        for unit in units:
            flats = [prefix + _flat_key(unit, k) for k in range(len(unit.flat_params))]
            saved_flats = [key for key in flats if key in state]
            if not saved_flats or any(prefix + key in state for key in unit.keys):
                continue
            if unit.shard_count == 1 and all(
                    state[key].numel() == f.numel() for key, f in zip(flats, unit.flat_params)):
                continue
            raise RuntimeError(
                f"{saved_flats[0]} is one rank's shard (model.module.state_dict() of a "
                f"job whose FSDP units were split over ranks); it cannot be loaded into "
                f"this model's {unit.shard_count} shards. Load full parameters (the "
                "wrapper's state_dict(); under mmengine's Runner, checkpoints saved with "
                "custom_hooks=[dict(type='distkit.FSDPCheckpointHook')]) or resume "
                "through the wrapper's load_state_dict / load_sharded_checkpoint")

    def before_load(state, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                    error_msgs):
        refuse_shards(state, prefix)
        for unit in units:
            # A tied parameter's other names: loaded under its first (from
            # either), then what nn.Module's own load finds as below.
            for key, i in unit.alias_keys:
                value = state.pop(prefix + key, None)
                if value is not None:
                    state.setdefault(prefix + unit.keys[i], value)
                if orig_params:
                    state[prefix + key] = unit.owned[i][2].detach()
            if not orig_params:  # the unit's module under its other names: itself
                for path in other_paths[id(unit)]:
                    for k, flat in enumerate(unit.flat_params):
                        state[f"{prefix}{path}.{flat_param_name(k)}"] = flat.detach()
            flats = [prefix + _flat_key(unit, k) for k in range(len(unit.flat_params))]
            originals = [prefix + key for key in unit.keys]
            given = [key for key in originals if key in state]
            shaped = [key for key, (_, _, _, shape) in zip(originals, unit.place)
                      if key in state and tuple(state[key].shape) == tuple(shape)]
            saved_flats = [key for key in flats if key in state]
            if given and len(shaped) == len(originals):
                # In the parameters' own dtype (a bfloat16 checkpoint into
                # a float32 model is converted, as nn.Module's load does).
                unit.load_full([state[key].detach().to(p.dtype)
                                for key, (_, _, p) in zip(originals, unit.owned)])
            elif given:
                wrong = [key for key in given if key not in shaped]
                error_msgs.append(
                    f"FSDP unit '{unit.path}': " +
                    (f"size mismatch for {wrong[0]}: {tuple(state[wrong[0]].shape)} in the "
                     f"checkpoint, {tuple(unit.place[originals.index(wrong[0])][3])} in the "
                     "model" if wrong else
                     f"the checkpoint has only {len(given)} of its {len(originals)} "
                     "parameters"))
            elif saved_flats and unit.shard_count == 1 and all(
                    state[key].numel() == f.numel() for key, f in zip(flats, unit.flat_params)):
                with torch.no_grad():
                    for key, flat in zip(flats, unit.flat_params):
                        flat.copy_(state[key].reshape(-1))
                unit.reshard()
                if unit.aliased:
                    unit.gathered = True
            else:
                missing_keys.extend(originals)
            # What nn.Module's own load then finds for the tensors it holds:
            # themselves (a copy onto itself changes nothing).
            for key in originals + flats:
                state.pop(key, None)
            if orig_params:
                for key, (_, _, p) in zip(originals, unit.owned):
                    state[key] = p.detach()
            else:
                for key, flat in zip(flats, unit.flat_params):
                    state[key] = flat.detach()

    module._register_state_dict_hook(after_state_dict)
    module._register_load_state_dict_pre_hook(before_load)
