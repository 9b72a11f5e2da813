"""Model state dicts and checkpoints of a FullyShardedDataParallel: the full
state dict under the original module's keys, and sharded ones (in
checkpoint_format's layout, shared with C++) that a job of another size can
load."""
import contextlib
from collections import OrderedDict
from typing import List, Optional

import torch
# What nn.Module.load_state_dict returns: (missing_keys, unexpected_keys).
from torch.nn.modules.module import _IncompatibleKeys

from .. import _lib, dist
from .._dlpack import Borrowed
from .._lib import lib, raise_for_status
from . import checkpoint_format as fmt
from .options import FullStateDictConfig, StateDictType


class ModelStateDictMixin:
    """FullyShardedDataParallel's state_dict / load_state_dict (torch's
    StateDictType), and sharded checkpoint files (checkpoint_format). It
    reads the model's ``module``, ``_units`` (their ``keys``: each
    parameter's state-dict key; ``path``: the unit's module path), ``_keys``
    (the original module's state-dict keys, in order), ``_tied`` (a tensor's
    further keys -> its first), ``_group``, ``_replicate_group`` and
    ``_buffer_dtypes``."""

    @staticmethod
    @contextlib.contextmanager
    def state_dict_type(module: "FullyShardedDataParallel", state_dict_type: StateDictType,
                        state_dict_config: Optional[FullStateDictConfig] = None):
        """torch's context: state_dict() / load_state_dict() inside it use
        ``state_dict_type`` (FULL_STATE_DICT outside), and a full state dict
        follows ``state_dict_config`` (FullStateDictConfig: rank0_only,
        offload_to_cpu)."""
        previous = (getattr(module, "_state_dict_type", StateDictType.FULL_STATE_DICT),
                    getattr(module, "_state_dict_config", None))
        module._state_dict_type = state_dict_type
        module._state_dict_config = state_dict_config
        try:
            yield
        finally:
            module._state_dict_type, module._state_dict_config = previous

    def _sharded(self) -> bool:
        return getattr(self, "_state_dict_type", StateDictType.FULL_STATE_DICT) in (
            StateDictType.SHARDED_STATE_DICT, StateDictType.LOCAL_STATE_DICT)

    def state_dict(self, *args, **kwargs) -> "OrderedDict[str, torch.Tensor]":
        """FULL_STATE_DICT (default): every parameter's full value under the
        original module's keys (collective; under
        FullStateDictConfig(rank0_only=True) the other ranks get {}). SHARDED_STATE_DICT /
        LOCAL_STATE_DICT: this rank's shards with the metadata that lets a
        job of another size, in Python or C++, load them (local): the
        contents of its file in checkpoint_format's layout."""
        buffers = {k: b.detach().to(self._buffer_dtypes.get(k, b.dtype))
                   for k, b in self.module.named_buffers()}
        # Parameters no unit holds (ignored): as they are.
        held = self._held_ids()
        unsharded = {k: p.detach() for k, p in self.module.named_parameters()
                     if id(p) not in held}
        out = OrderedDict()
        if self._sharded():
            for unit in self._units:
                out[fmt.meta_key(unit.path)] = self._meta(unit)
                for k, flat in enumerate(unit.flat_params):
                    out[fmt.flat_key(unit.path, k)] = flat.detach().clone()
            for key in self._keys:
                if key in unsharded:
                    out[fmt.param_key(key)] = unsharded[key].clone()
                elif key in buffers:
                    out[fmt.buffer_key(key)] = buffers[key].clone()
            return out
        config = getattr(self, "_state_dict_config", None) or FullStateDictConfig()
        # rank0_only: the other ranks take part in each unit's gather and drop
        # its result at once, so no rank but 0 ever holds more than one unit.
        keep = not config.rank0_only or not dist.is_distributed() or dist.get_rank() == 0
        place = (lambda t: t.cpu()) if config.offload_to_cpu else (lambda t: t)
        params = {}
        for unit in self._units:
            for key, value in zip(unit.keys, unit.gather_full()):
                if keep:
                    params[key] = place(value)
        if not keep:
            return out
        for key in self._keys:
            first = self._tied.get(key, key)  # a tied tensor: its value under every key
            if first in params:
                out[key] = params[first]
            elif first in out:
                out[key] = out[first]
            else:
                value = buffers[first] if first in buffers else unsharded[first]
                out[key] = place(value.clone())
        return out

    @staticmethod
    def _meta(unit) -> torch.Tensor:
        return fmt.encode_meta(unit.shard_count,
                               [(f.dtype, n) for f, n in zip(unit.flat_params, unit.flat_numel)],
                               # The parameters' whole sizes (under
                               # use_orig_params each is its piece's).
                               [numel for _, _, numel, _ in unit.place], unit.frozen)

    def load_state_dict(self, state_dict, strict: bool = True):
        """Loads what state_dict() gave under the same state-dict type; a
        sharded dict must come from a job of this size (load_sharded_state_dicts
        re-shards from another size). A full dict as nn.Module's: returns
        (missing_keys, unexpected_keys); strict=False loads what is there
        (a missing key keeps its value), strict=True raises naming them
        before anything is loaded. A value of another shape than the model's
        raises nn.Module's "size mismatch for <key>" RuntimeError on every
        rank (whichever rank's dict has it), whatever ``strict``, before
        anything is loaded; a value of another dtype is converted to the
        model's. Collective (every rank with the same keys)."""
        is_sharded = fmt.is_sharded(state_dict)
        if is_sharded != self._sharded():
            raise RuntimeError(
                "load_state_dict: this is a " + ("sharded" if is_sharded else "full") +
                " state dict but the model expects a " +
                ("sharded" if self._sharded() else "full") + " one; load it inside "
                "FullyShardedDataParallel.state_dict_type(model, StateDictType." +
                ("SHARDED_STATE_DICT" if is_sharded else "FULL_STATE_DICT") + ")")
        if is_sharded:
            self.load_sharded_state_dicts([state_dict], only_mine=True)
            return _IncompatibleKeys([], [])
        missing = [k for k in self._keys if k not in state_dict]
        unexpected = [k for k in state_dict if k not in self._keys]
        # Raised after the ranks agree (below): a rank raising alone left
        # the others waiting in the agreement or in rank 0's broadcasts.
        keys_error = None
        if strict and (missing or unexpected):
            # torch's nn.Module.load_state_dict message, exactly.
            keys_error = RuntimeError(
                f"Error(s) in loading state_dict for {type(self).__name__}:\n\t" +
                "\n\t".join(f"{what} key(s) in state_dict: " +
                              ", ".join(f'"{k}"' for k in keys) + ". "
                              for what, keys in (("Missing", missing),
                                                 ("Unexpected", unexpected))
                              if keys))
        # Each tensor's value under the first of its keys that is given (a
        # tied parameter loads from either name).
        given = {}
        for key in self._keys:
            if key in state_dict:
                given.setdefault(self._tied.get(key, key), state_dict[key])
        # Which keys each rank gives, decided together (one all_reduce over
        # the shard group): a unit whose keys every rank gives loads them
        # (local); one some rank lacks a key of is gathered on every rank
        # (collective, so the ranks' calls pair up) to keep what is not
        # given; where the ranks' dicts differ in its keys (rank0_only: {}
        # on the others), rank 0's values go to every rank.
        # HYBRID_*: decided over the model's ranks (the shard group, then
        # the replicate group: every rank of every replica, and no rank
        # outside the model, which may span only part of the world), so a
        # rank-0-only dict reaches every replica: the values then come from
        # the rank holding the dict (rank 0 of its shard group and of its
        # replicate group: global rank 0 where the model spans the world),
        # over the replicate group, then over the shard group. (Over the
        # shard group alone, the replicas without that rank all lacked every
        # key and kept their own values; over the whole world, ranks outside
        # the model never called and the job hung.)
        replicas = getattr(self, "_replicate_group", None)
        hybrid = replicas is not None
        firsts = list(dict.fromkeys(self._tied.get(k, k) for k in self._keys))
        # A value of another shape than the model's tensor (nn.Module's
        # "size mismatch"; the same number of elements loaded scrambled
        # before) is agreed on too, in the third row (the job rank + 1 of a
        # rank whose dict has it), so every rank raises before anything is
        # loaded (rank0_only: the others would wait in a broadcast).
        shapes = self._model_shapes()
        me = dist.get_rank() if dist.is_distributed() else 0
        wrong = {k for k in firsts if isinstance(given.get(k), torch.Tensor) and k in shapes
                 and tuple(given[k].shape) != tuple(shapes[k])}
        # The last column: the job rank + 1 of a rank whose strict load
        # fails on its keys.
        flags = torch.tensor([[0 if k in given else 1 for k in firsts] + [0],
                              [1 if k in given else 0 for k in firsts] + [0],
                              [me + 1 if k in wrong else 0 for k in firsts] +
                              [me + 1 if keys_error is not None else 0]], dtype=torch.int32)
        for scope in ((self._group, replicas) if hybrid else (self._group,)):
            if dist.is_distributed() and dist.get_world_size(scope) > 1:
                dist.all_reduce(flags, op="max", group=scope)
        if keys_error is not None:
            raise keys_error
        if int(flags[2, -1]):
            raise RuntimeError(
                f"Error(s) in loading state_dict for {type(self).__name__}:\n\trank "
                f"{int(flags[2, -1]) - 1}'s state dict lacks keys of the model or has others "
                "(strict=True)")
        flags = flags[:, :-1]
        mismatched = [(k, r - 1) for k, r in zip(firsts, flags[2].tolist()) if r]
        if mismatched:
            raise RuntimeError(
                f"Error(s) in loading state_dict for {type(self).__name__}:\n\t" +
                "\n\t".join(
                    f"size mismatch for {k}: copying a param with shape {given[k].shape} from "
                    f"checkpoint, the shape in current model is {torch.Size(shapes[k])}."
                    if k in wrong else
                    f"size mismatch for {k}: copying a param with another shape from rank "
                    f"{r}'s checkpoint, the shape in current model is "
                    f"{torch.Size(shapes[k])}." for k, r in mismatched))
        lacking = {k for k, f in zip(firsts, flags[0].tolist()) if f}  # on some rank
        differ = {k for k, f, g in zip(firsts, flags[0].tolist(), flags[1].tolist())
                  if f and g}  # given on some ranks, not on others
        for unit in self._units:
            # In the parameters' own dtype (a bfloat16 checkpoint into a
            # float32 model is converted, as nn.Module's load does).
            values = [given[k].detach().to(p.dtype) if k in given else None
                      for k, (_, _, p) in zip(unit.keys, unit.owned)]
            if any(k in lacking for k in unit.keys):  # keep what is not given
                values = [v if v is not None else now
                          for v, now in zip(values, unit.gather_full())]
            from_rank0 = any(k in differ for k in unit.keys)
            if from_rank0 and hybrid:
                # Rank 0 of each shard group gets the holder's values over
                # its replicate group; load_full then takes them over the
                # shard group from there.
                values = [_from_first(v, shape, p.dtype, unit.device, replicas)
                          for v, (_, _, _, shape), (_, _, p) in zip(values, unit.place,
                                                                     unit.owned)]
            unit.load_full(values, rank0_only=from_rank0)
        held = self._held_ids()
        with torch.no_grad():
            for key, t in list(self.module.named_parameters()) + list(self.module.named_buffers()):
                if id(t) in held:
                    continue
                if key in given:
                    t.copy_(given[key])  # buffers, and parameters no unit holds
                if self._tied.get(key, key) in differ and key == self._tied.get(key, key):
                    for scope in ((replicas, self._group) if hybrid else (self._group,)):
                        if dist.get_world_size(scope) > 1:
                            dist.broadcast(t.data, dist.get_global_rank(scope, 0), scope)
        return _IncompatibleKeys(missing, unexpected)

    def _model_shapes(self) -> dict:
        """The shape of each tensor of the model under its (first) state-dict
        key: the units' parameters' whole shapes, the others' own."""
        shapes = {}
        for unit in self._units:
            for key, (_, _, _, shape) in zip(unit.keys, unit.place):
                shapes[key] = tuple(shape)
        held = self._held_ids()
        for key, t in list(self.module.named_parameters()) + list(self.module.named_buffers()):
            if id(t) not in held:
                shapes.setdefault(key, tuple(t.shape))
        return shapes

    def _held_ids(self) -> set:
        """ids of the units' flat shards and original parameters."""
        held = {id(p) for u in self._units for p in u.flat_params}
        held.update(id(p) for u in self._units for _, _, p in u.owned)
        return held

    def _saved_world(self, state: dict) -> int:
        """The saved job's shard-group size, after checking that every unit
        of this model is in `state` with the same parameters (ValueError
        naming the first difference: a checkpoint of another model)."""
        paths = fmt.unit_paths(state)
        mine = [u.path for u in self._units]
        if sorted(paths) != sorted(mine):
            raise ValueError("load_sharded_state_dicts: the checkpoint is of another model "
                             f"(units {sorted(paths)}, this model {sorted(mine)})")
        world = None
        for unit in self._units:
            key = fmt.meta_key(unit.path)
            saved_world, flats, numels, frozen = fmt.decode_meta(state[key], key)
            _, my_flats, my_numels, my_frozen = fmt.decode_meta(self._meta(unit), key)
            if numels == my_numels and frozen != my_frozen:
                # Which parameters are frozen decides their flat shards.
                raise ValueError(
                    f"load_sharded_state_dicts: unit '{unit.path}' has other parameters "
                    f"frozen in the checkpoint ({[i for i, f in enumerate(frozen) if f]}, this "
                    f"model {[i for i, f in enumerate(my_frozen) if f]}); frozen parameters "
                    "have flat shards of their own since distkit ABI 0.13, so a checkpoint "
                    "saved before that of such a unit loads only as a full state dict")
            if (flats, numels) != (my_flats, my_numels):
                raise ValueError(f"load_sharded_state_dicts: unit '{unit.path}' has other "
                                 "parameters in the checkpoint (a checkpoint of another model?)")
            if world is not None and saved_world != world:
                raise ValueError(f"load_sharded_state_dicts: {key} says {saved_world} ranks, "
                                 f"another unit {world}")
            world = saved_world
        return world or 1

    def load_sharded_state_dicts(self, state_dicts: List[Optional[dict]],
                                 only_mine: bool = False):
        """Loads a sharded checkpoint saved by a job of any size, in Python
        or C++: every saved rank's state_dict() under SHARDED_STATE_DICT (its
        file's contents), in rank order; None for one whose shards this rank
        does not hold any part of (the library says which it missed). Each
        unit takes the parts of the saved shards it now holds. Local."""
        first = next((sd for sd in state_dicts if sd is not None), None)
        if first is None:
            raise ValueError("load_sharded_state_dicts: no state dict given")
        world = self._saved_world(first)
        if only_mine:
            mine = [[f.numel() for f in u.flat_params] for u in self._units]
            saved = [[state_dicts[0][fmt.flat_key(u.path, k)].numel()
                      for k in range(len(u.flat_params))] for u in self._units]
            if world != self._units[0].shard_count or mine != saved:
                raise ValueError("load_state_dict: a sharded state dict from a job of "
                                 f"{world} ranks; use load_sharded_state_dicts with every rank's")
            for unit in self._units:
                for k, flat in enumerate(unit.flat_params):
                    with torch.no_grad():
                        flat.copy_(state_dicts[0][fmt.flat_key(unit.path, k)])
                unit.reshard()
                if unit.aliased:
                    unit.gathered = True
        else:
            if len(state_dicts) != world:
                raise ValueError(f"load_sharded_state_dicts: {len(state_dicts)} state dicts for a "
                                 f"checkpoint of {world} ranks")
            for unit in self._units:
                saved = [sd[fmt.flat_key(unit.path, k)].contiguous() if sd is not None else None
                         for k in range(len(unit.flat_params)) for sd in state_dicts]
                views = [Borrowed(t) if t is not None else None for t in saved]
                pointers = (_lib.T * len(views))(*[v.pointer if v is not None else None
                                                   for v in views])
                raise_for_status(lib.dk_shard_load_sharded, unit.handle, world, pointers,
                                 len(views))
                unit.reshard()
                if unit.aliased:
                    unit.gathered = True
        self._load_unsharded(first)
        return None

    def save_sharded_checkpoint(self, directory: str) -> None:
        """C++'s SaveShardedCheckpoint: each rank writes its state_dict()
        under SHARDED_STATE_DICT to ``<directory>/shard_rank<R>.pt`` (R its
        rank in the shard group; under HYBRID_* the first replica writes).
        Collective over the model's ranks (its shard group, then under
        HYBRID_* its replicate group; not the world, which may hold ranks
        outside the model): every file exists when it returns, or every
        rank raises a RuntimeError naming a rank whose write failed (that
        rank's own error chained)."""
        with self.state_dict_type(self, StateDictType.SHARDED_STATE_DICT):
            state = self.state_dict()
        replicas = getattr(self, "_replicate_group", None)
        error, path = None, None
        if replicas is None or dist.get_rank(replicas) == 0:
            rank = dist.get_rank(self._group) if dist.is_distributed() else 0
            path = fmt.shard_file(directory, rank)
            try:
                fmt.write(path, state)
            except Exception as e:  # noqa: BLE001 - agreed on below, then raised
                error = e
        me = dist.get_rank() if dist.is_distributed() else 0
        # The job rank + 1 of a rank whose write failed (the highest), 0
        # when none did; after it every rank's write is done.
        failed = torch.tensor([me + 1 if error is not None else 0], dtype=torch.int64)
        for scope in ((self._group, replicas) if replicas is not None else (self._group,)):
            if dist.is_distributed() and dist.get_world_size(scope) > 1:
                dist.all_reduce(failed, op="max", group=scope)
        if error is not None:
            raise RuntimeError(f"save_sharded_checkpoint: rank {me}'s checkpoint file "
                               f"{path} could not be written: {error}") from error
        if int(failed.item()):
            raise RuntimeError(f"save_sharded_checkpoint: rank {int(failed.item()) - 1}'s "
                               f"checkpoint file in {directory} could not be written")

    def load_sharded_checkpoint(self, directory: str) -> None:
        """Loads what save_sharded_checkpoint (or C++'s
        SaveShardedCheckpoint) wrote, from a job of any size: this rank
        reads rank 0's file (the checkpoint's layout) and only the others
        whose shards overlap its own (its own alone at the same size), as
        C++'s loader does. Local."""
        # The checkpoint's layout from rank 0's file, which every save
        # writes: a file of a higher rank may be an older, larger job's.
        files = {0: fmt.read(fmt.shard_file(directory, 0))}
        world = self._saved_world(files[0])
        for r in sorted(self._ranks_needed(files[0], world) - set(files)):
            files[r] = fmt.read(fmt.shard_file(directory, r))
        self.load_sharded_state_dicts([files.get(r) for r in range(world)])

    def _ranks_needed(self, state: dict, world: int) -> set:
        """The saved ranks whose shards hold part of this rank's, as the
        library reads them (FlatShard::LoadShardedParams): a flat of n
        elements saved by `world` ranks has shards of
        max(world, ceil(n / world) * world) / world elements."""
        needed = set()
        for unit in self._units:
            key = fmt.meta_key(unit.path)
            _, flats, _, _ = fmt.decode_meta(state[key], key)
            for (_, numel), flat in zip(flats, unit.flat_params):
                saved = max(world, -(-numel // world) * world) // world
                begin = unit.shard_rank * flat.numel()
                end = min(begin + flat.numel(), numel)
                if end > begin:
                    needed.update(range(begin // saved, (end - 1) // saved + 1))
        return needed

    def _load_unsharded(self, state) -> None:
        """Parameters no unit holds and buffers, from a sharded dict."""
        with torch.no_grad():
            for name, p in self.module.named_parameters():
                if fmt.param_key(name) in state:
                    p.copy_(state[fmt.param_key(name)])
            for name, b in self.module.named_buffers():
                if fmt.buffer_key(name) in state:
                    b.copy_(state[fmt.buffer_key(name)])


def _from_first(value: Optional[torch.Tensor], shape, dtype, device, group) -> torch.Tensor:
    """The `value` of `group`'s rank 0 on every rank of `group`, on `device`
    (collective over `group`)."""
    out = (value.detach().to(device, dtype).reshape(shape).contiguous().clone()
           if value is not None else torch.empty(shape, dtype=dtype, device=device))
    if dist.get_world_size(group) > 1:
        dist.broadcast(out, dist.get_global_rank(group, 0), group)
    return out
