"""Snapshots of a FullyShardedDataParallel model, where each rank's shard
exists once: at every commit each rank keeps its own shard (parameters and
optimizer state) and a copy of its right-hand neighbour's (rank r holds
r and r + 1 mod N), so any one lost shard survives in a peer's memory at
2/N of the model's state per rank. After a change of membership:
- the same number of ranks (a replacement): each rank loads its own shard;
  the one a newcomer takes comes from the neighbour that copied it;
- another number (the survivors shrank): every rank gets every shard for a
  moment (held by a survivor, or by the lost rank's neighbour) and loads
  its part of the new layout, parameters and per-element optimizer state
  alike (load_sharded_state_dicts re-shards them).
Shards travel by exchange.py (only to the ranks that need them)."""
import copy
from typing import Any, Dict, List, Optional

import torch

from .. import dist
from ..fsdp import FullyShardedDataParallel, StateDictType
from ..fsdp import checkpoint_format as fmt
from . import packed
from .exchange import exchange


def is_sharded(model) -> bool:
    return isinstance(model, FullyShardedDataParallel)


def capture_own(model: FullyShardedDataParallel, optimizer) -> Dict[str, Any]:
    """Local: a copy of this rank's shard (parameters and optimizer state)."""
    with FullyShardedDataParallel.state_dict_type(model, StateDictType.SHARDED_STATE_DICT):
        own = {"model": model.state_dict()}  # copies (the shards cloned)
    own["optimizer"] = copy.deepcopy(optimizer.state_dict()) if optimizer is not None else None
    return own


def device_of(model: FullyShardedDataParallel) -> Optional[torch.device]:
    """The GPU the model's shards are on, if any (where a peer's shard that
    was on its GPU goes when it arrives here)."""
    for p in model.parameters():
        if p.is_cuda:
            return p.device
    return None


def with_neighbour(own: Dict[str, Any], n: int, me: int, group=None,
                   device: Optional[torch.device] = None) -> Dict[int, Any]:
    """Collective over ``group`` (default: the default group; its ranks are
    the shard indices): this rank's shard ``own`` and a copy of its
    neighbour's (its GPU tensors onto ``device``), by shard index."""
    shards = {me: own}
    if n > 1:
        received = exchange({(me - 1) % n: packed.pack(own)}, group)
        shards[(me + 1) % n] = packed.unpack(received[(me + 1) % n], device)
    return shards


def capture(model: FullyShardedDataParallel, optimizer) -> Dict[int, Any]:
    """Collective over the default group (the model's): this rank's shard
    and its neighbour's, by shard index (the rank in the model's group)."""
    return with_neighbour(capture_own(model, optimizer), dist.get_world_size(),
                          dist.get_rank(), device=device_of(model))


def _flat_of_optimizer_index(model: FullyShardedDataParallel, optimizer) -> Dict[int, tuple]:
    """Index in the optimizer's state dict -> (unit path, flat index; under
    use_orig_params the original parameter's index in the unit)."""
    places = model._places()
    out, index = {}, 0
    for group in optimizer.param_groups:
        for p in group["params"]:
            if id(p) in places:
                unit, k = places[id(p)]
                out[index] = (unit.path, k)
            index += 1
    return out


def _reshard_orig_state(unit, i: int, index: int, name: str, shards: List[Dict[str, Any]]):
    """use_orig_params: per-element state `name` of original parameter `i`
    as this rank's piece of the new layout, or None when it is not
    per-element. In the library's layout (each flat buffer padded to a
    multiple of the shard count, shard j holding [j * S, (j + 1) * S) of
    it) the old shards' pieces, in shard order, tile the parameter, so the
    new piece is a slice of their concatenation, in the state's own dtype."""
    k, offset, numel, _ = unit.place[i]
    length = shards[0]["model"][fmt.flat_key(unit.path, k)].numel()  # S
    pieces = [max(0, min(offset + numel, (j + 1) * length) - max(offset, j * length))
              for j in range(len(shards))]
    values = [shard["optimizer"]["state"].get(index, {}).get(name) for shard in shards]
    if not all(isinstance(v, torch.Tensor) and v.dim() == 1 and v.numel() == n
               for v, n in zip(values, pieces)):
        return None
    if sum(pieces) != numel:
        raise ValueError(f"distkit.elastic: unit '{unit.path}' parameter {i}: the old shards "
                         f"hold {sum(pieces)} of its {numel} elements")
    whole = torch.cat(values)
    start, count = unit.piece_offset[i], unit.piece_data[i].numel()
    return whole[start:start + count].clone()


def _reshard_optimizer(model, optimizer, shards: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The optimizer state dict of this rank's part of the new layout, from
    every old shard's: per-element states (1-D, a flat shard's length)
    re-sharded through the model's own loader, or under use_orig_params (a
    parameter's piece) by slicing; the rest (step counts, hyper-parameters)
    from shard 0."""
    first = shards[0]["optimizer"]
    flats = _flat_of_optimizer_index(model, optimizer)
    state: Dict[int, Dict[str, Any]] = {}
    for index, entry in first["state"].items():
        state[index] = {}
        for name, value in entry.items():
            path, k = flats.get(index, (None, None))
            if model.use_orig_params and path is not None:
                unit = next(u for u in model._units if u.path == path)
                resharded = _reshard_orig_state(unit, k, index, name, shards)
                state[index][name] = value if resharded is None else resharded
                continue
            local = shards[0]["model"].get(fmt.flat_key(path, k)) if path is not None else None
            per_element = (isinstance(value, torch.Tensor) and local is not None
                           and value.dim() == 1 and value.numel() == local.numel())
            if not per_element:
                state[index][name] = value
                continue
            # Each old shard's values of `name` in place of its parameters:
            # loading them re-shards them as parameters would be.
            as_params = []
            for shard in shards:
                pseudo = dict(shard["model"])
                pseudo[fmt.flat_key(path, k)] = shard["optimizer"]["state"][index][name]
                as_params.append(pseudo)
            model.load_sharded_state_dicts(as_params)
            unit = next(u for u in model._units if u.path == path)
            state[index][name] = unit.flat_params[k].detach().clone()
    return {"state": state, "param_groups": first["param_groups"]}


def _on_host(value):
    """`value` (tensors in dicts, lists and tuples) with its GPU tensors
    copied to the host; host tensors are the same objects."""
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, dict):
        return {k: _on_host(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_on_host(v) for v in value)
    return value


def load(model: FullyShardedDataParallel, optimizer, held: Dict[int, Any], old_world: int,
         holders: Dict[int, int], held_by: Dict[int, set]) -> None:
    """Collective over the (new) default group, after model.regroup():
    every rank ends with its part of the new layout. `held`: the shards of
    the newest commit this rank holds (none if its snapshot is older);
    `holders`: shard index -> the rank that sends it; `held_by`: rank ->
    the shard indices it holds, so nothing is sent to a rank that has it."""
    n, me = dist.get_world_size(), dist.get_rank()
    same_layout = n == old_world

    def needs(rank: int) -> List[int]:
        return [rank] if same_layout else list(range(old_world))

    outgoing = {}
    for rank in range(n):
        wanted = [j for j in needs(rank) if holders[j] == me and j not in held_by[rank]]
        if wanted:
            outgoing[rank] = packed.pack({j: held[j] for j in wanted})
    received = exchange(outgoing)
    # A new layout takes every old shard: on the host, since the whole
    # model and optimizer state would not fit on a GPU (the loaders take
    # host tensors and keep only this rank's part on the model's device),
    # the ones this rank held included.
    device = device_of(model) if same_layout else None
    have = dict(held) if same_layout else {j: _on_host(v) for j, v in held.items()}
    for payload in received.values():
        have.update(packed.unpack(payload, device))
    received = payload = None  # the receive buffer: every shard is a copy now
    if same_layout:
        own = have[me]
        with FullyShardedDataParallel.state_dict_type(model, StateDictType.SHARDED_STATE_DICT):
            model.load_state_dict(own["model"])
        if optimizer is not None:
            # A copy: the shard stays this rank's snapshot as committed.
            optimizer.load_state_dict(copy.deepcopy(own["optimizer"]))
        return
    shards = [have[j] for j in range(old_world)]
    if optimizer is not None:
        optimizer_state = _reshard_optimizer(model, optimizer, shards)
    model.load_sharded_state_dicts([s["model"] for s in shards])  # the parameters, last
    if optimizer is not None:
        optimizer.load_state_dict(optimizer_state)
