"""Optimizer state dicts of a FullyShardedDataParallel (torch's
FSDP.optim_state_dict and friends): per-element state gathered to the
original parameters' shapes and names, so a job of any size loads it, and
each rank's part of such a dict."""
from typing import List, Optional

import torch

from .. import dist
from .unit import Unit


class OptimStateDictMixin:
    """FullyShardedDataParallel's optimizer state dicts. It reads the model's
    ``_units`` (their ``keys``: each parameter's state-dict key) and
    ``use_orig_params``."""

    def _places(self) -> dict:
        """id(what the optimizer steps) -> (unit, index): index of the original
        parameter (use_orig_params) or of the flat shard."""
        places = {}
        for unit in self._units:
            if self.use_orig_params:
                for i, (_, _, p) in enumerate(unit.owned):
                    places[id(p)] = (unit, i)
            else:
                for k, flat in enumerate(unit.flat_params):
                    places[id(flat)] = (unit, k)
        return places

    def _whole_places(self) -> dict:
        """id(parameter) -> its name, for the parameters no unit holds
        (frozen or ignored: whole on every rank); an optimizer built from
        parameters() holds them too."""
        held = self._held_ids()
        return {id(p): name for name, p in self.module.named_parameters() if id(p) not in held}

    @staticmethod
    def _is_sharded_state(value, local: torch.Tensor) -> bool:
        return isinstance(value, torch.Tensor) and value.dim() == 1 and \
            value.numel() == local.numel() and local.dim() == 1

    def _full_states(self, unit: Unit, index: int, state: dict) -> List[tuple]:
        """(key, {name: full value}) for what the optimizer keeps about one
        stepped tensor: per-element states gathered to the original shapes
        (collective over the unit's group), others (step counts) as they are."""
        if self.use_orig_params:
            p = unit.owned[index][2]
            key = unit.keys[index]
            shape, numel = unit.place[index][3], unit.place[index][2]
            out = {}
            for name, value in state.items():
                if not self._is_sharded_state(value, p.data):
                    out[name] = value
                    continue
                full = torch.zeros(numel, dtype=value.dtype)
                # Each element from the one rank that holds it.
                if unit.shard_count > 1 or unit.shard_rank == 0:
                    offset = unit.piece_offset[index]
                    full[offset:offset + value.numel()] = value
                if unit.shard_count > 1:
                    dist.all_reduce(full, group=unit.group)
                out[name] = full.view(shape)
            return [(key, out)]
        flat = unit.flat_params[index]
        gathered = {}
        for name, value in state.items():
            if self._is_sharded_state(value, flat.data):
                parts = dist.all_gather(value.contiguous(), group=unit.group) \
                    if unit.shard_count > 1 else [value]
                gathered[name] = torch.cat([t.reshape(-1) for t in parts])
        result = []
        for i, (k, offset, numel, shape) in enumerate(unit.place):
            if k != index:
                continue
            out = {name: (gathered[name][offset:offset + numel].clone().view(shape)
                          if name in gathered else value) for name, value in state.items()}
            result.append((unit.keys[i], out))
        return result

    @staticmethod
    def optim_state_dict(model: "FullyShardedDataParallel", optim: torch.optim.Optimizer,
                         rank0_only: bool = False) -> dict:
        """torch's FSDP.optim_state_dict: the optimizer's state with every
        per-element state (momentum, Adam's moments) gathered to the full
        shape, keyed by the original parameter names, so a job of any size
        loads it (optim_state_dict_to_load). Collective. ``rank0_only``
        (torch's full_optim_state_dict's): rank 0 keeps the gathered states,
        in CPU memory; the other ranks drop each as it is gathered and get
        {}."""
        places = model._places()
        whole = model._whole_places()
        keep = not rank0_only or not dist.is_distributed() or dist.get_rank() == 0
        state, groups = {}, []
        for group in optim.param_groups:
            names = []
            for p in group["params"]:
                if id(p) in whole:  # whole on every rank: its state as it is
                    names.append(whole[id(p)])
                    if optim.state.get(p) and keep:
                        state[whole[id(p)]] = {
                            name: (value.cpu() if rank0_only else value.detach().clone())
                            if isinstance(value, torch.Tensor) else value
                            for name, value in optim.state[p].items()}
                    continue
                if id(p) not in places:
                    raise ValueError("optim_state_dict: the optimizer steps a tensor that is not "
                                     "one of this model's parameters()")
                unit, index = places[id(p)]
                for key, full in model._full_states(unit, index, optim.state.get(p, {})):
                    names.append(key)
                    if full and keep:
                        state[key] = {name: value.cpu() if rank0_only and
                                      isinstance(value, torch.Tensor) else value
                                      for name, value in full.items()}
            groups.append({**{k: v for k, v in group.items() if k != "params"},
                           "params": names})
        if not keep:
            return {}
        return {"state": state, "param_groups": groups}

    full_optim_state_dict = optim_state_dict

    @staticmethod
    def optim_state_dict_to_load(model: "FullyShardedDataParallel", optim: torch.optim.Optimizer,
                                 optim_state_dict: dict) -> dict:
        """torch's FSDP.optim_state_dict_to_load: what ``optim.load_state_dict``
        takes on this rank, from a dict optim_state_dict gave (saved by a job
        of any size): each rank keeps its part of every per-element state.
        Local."""
        places = model._places()
        whole = model._whole_places()
        full_state = optim_state_dict["state"]
        saved_groups = optim_state_dict["param_groups"]
        if len(saved_groups) != len(optim.param_groups):
            raise ValueError(f"optim_state_dict_to_load: {len(saved_groups)} parameter groups "
                             f"saved, the optimizer has {len(optim.param_groups)}")
        state, groups, next_id = {}, [], 0
        for saved, group in zip(saved_groups, optim.param_groups):
            ids = []
            expected = []
            for p in group["params"]:
                if id(p) in whole:  # whole on every rank: its state as saved
                    expected.append(whole[id(p)])
                    saved_state = full_state.get(whole[id(p)])
                    if saved_state:
                        state[next_id] = dict(saved_state)
                    ids.append(next_id)
                    next_id += 1
                    continue
                unit, index = places[id(p)]
                if model.use_orig_params:
                    keys = [unit.keys[index]]
                else:
                    keys = [unit.keys[i] for i, pl in enumerate(unit.place) if pl[0] == index]
                expected += keys
                mine = model._local_state(unit, index, [full_state.get(k) for k in keys])
                if mine:
                    state[next_id] = mine
                ids.append(next_id)
                next_id += 1
            if saved["params"] != expected:
                raise ValueError("optim_state_dict_to_load: the saved parameter group holds "
                                 f"{saved['params']}, the optimizer's {expected} (another model?)")
            groups.append({**{k: v for k, v in saved.items() if k != "params"}, "params": ids})
        return {"state": state, "param_groups": groups}

    def _local_state(self, unit: Unit, index: int, fulls: List[Optional[dict]]) -> dict:
        """This rank's part of the full states `fulls` (one per original
        parameter behind the stepped tensor `index`; None: no state yet)."""
        present = [f for f in fulls if f]
        if not present:
            return {}
        if len(present) != len(fulls):
            raise ValueError("optim_state_dict_to_load: state for only some parameters of a "
                             "unit's flat shard")
        out = {}
        if self.use_orig_params:
            offset, numel = unit.piece_offset[index], unit.piece_data[index].numel()
            for name, value in present[0].items():
                if isinstance(value, torch.Tensor) and value.dim() > 0 and \
                        value.numel() == unit.place[index][2]:
                    out[name] = value.reshape(-1)[offset:offset + numel].clone()
                else:
                    out[name] = value
            return out
        shard = unit.flat_params[index].numel()
        begin = unit.shard_rank * shard
        members = [i for i, pl in enumerate(unit.place) if pl[0] == index]
        for name, value in present[0].items():
            per_element = isinstance(value, torch.Tensor) and value.dim() > 0 and \
                value.numel() == unit.place[members[0]][2]
            if not per_element:
                out[name] = value
                continue
            flat = torch.zeros(shard * unit.shard_count, dtype=value.dtype)
            for i, full in zip(members, present):
                _, offset, numel, _ = unit.place[i]
                flat[offset:offset + numel] = full[name].reshape(-1)
            out[name] = flat[begin:begin + shard].clone()
        return out
