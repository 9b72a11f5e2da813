"""Model state dicts and checkpoints of a FullyShardedDataParallel: the full
state dict under the original module's keys, and sharded ones that a job of
another size can load."""
import contextlib
from collections import OrderedDict
from typing import List

import torch

from .. import _lib, dist
from .._dlpack import Borrowed
from .._lib import lib, raise_for_status
from .options import StateDictType


class ModelStateDictMixin:
    """FullyShardedDataParallel's state_dict / load_state_dict (torch's
    StateDictType). It reads the model's ``module``, ``_units`` (their
    ``keys``: each parameter's state-dict key), ``_keys`` (the original
    module's state-dict keys, in order), ``_group`` and ``_buffer_dtypes``."""

    _SHARD_META = "_dk_shard_meta"

    @staticmethod
    @contextlib.contextmanager
    def state_dict_type(module: "FullyShardedDataParallel", state_dict_type: StateDictType):
        """torch's context: state_dict() / load_state_dict() inside it use
        ``state_dict_type`` (FULL_STATE_DICT outside)."""
        previous = getattr(module, "_state_dict_type", StateDictType.FULL_STATE_DICT)
        module._state_dict_type = state_dict_type
        try:
            yield
        finally:
            module._state_dict_type = previous

    def _sharded(self) -> bool:
        return getattr(self, "_state_dict_type", StateDictType.FULL_STATE_DICT) in (
            StateDictType.SHARDED_STATE_DICT, StateDictType.LOCAL_STATE_DICT)

    def state_dict(self, *args, **kwargs) -> "OrderedDict[str, torch.Tensor]":
        """FULL_STATE_DICT (default): every parameter's full value under the
        original module's keys (collective). SHARDED_STATE_DICT /
        LOCAL_STATE_DICT: this rank's shards ("_flat_param.<unit>.<flat>")
        with the metadata that lets a job of another size load them (local)."""
        buffers = {k: b.detach().to(self._buffer_dtypes.get(k, b.dtype))
                   for k, b in self.module.named_buffers()}
        # Parameters no unit holds (ignored): as they are.
        unsharded = {k: p.detach() for k, p in self.module.named_parameters()}
        out = OrderedDict()
        if self._sharded():
            for u, unit in enumerate(self._units):
                for k, flat in enumerate(unit.flat_params):
                    out[f"_flat_param.{u}.{k}"] = flat.detach().clone()
            for key in self._keys:
                if key in buffers:
                    out[key] = buffers[key].clone()
            out[self._SHARD_META] = {
                "world_size": dist.get_world_size(self._group) if dist.is_distributed() else 1,
                "flat_numel": [[f.numel() for f in u.flat_params] for u in self._units],
                "keys": [list(u.keys) for u in self._units],
            }
            return out
        params = {}
        for unit in self._units:
            for key, value in zip(unit.keys, unit.gather_full()):
                params[key] = value
        for key in self._keys:
            if key in params:
                out[key] = params[key]
            else:
                out[key] = (buffers[key] if key in buffers else unsharded[key]).clone()
        return out

    def load_state_dict(self, state_dict, strict: bool = True):
        """Loads what state_dict() gave under the same state-dict type; a
        sharded dict must come from a job of this size (load_sharded_state_dicts
        re-shards from another size)."""
        is_sharded = self._SHARD_META in state_dict
        if is_sharded != self._sharded():
            raise RuntimeError(
                "load_state_dict: this is a " + ("sharded" if is_sharded else "full") +
                " state dict but the model expects a " +
                ("sharded" if self._sharded() else "full") + " one; load it inside "
                "FullyShardedDataParallel.state_dict_type(model, StateDictType." +
                ("SHARDED_STATE_DICT" if is_sharded else "FULL_STATE_DICT") + ")")
        if is_sharded:
            return self.load_sharded_state_dicts([state_dict], only_mine=True)
        missing = [k for k in self._keys if k not in state_dict]
        unexpected = [k for k in state_dict if k not in self._keys]
        if strict and (missing or unexpected):
            raise RuntimeError(f"Error(s) in loading state_dict: missing keys {missing}, "
                               f"unexpected keys {unexpected}")
        for unit in self._units:
            unit.load_full([state_dict[k] for k in unit.keys])
        self._load_buffers(state_dict)
        return None

    def load_sharded_state_dicts(self, state_dicts: List[dict], only_mine: bool = False):
        """Loads a sharded checkpoint saved by a job of any size: every saved
        rank's state_dict() under SHARDED_STATE_DICT, in rank order (read
        from shared storage). Each unit takes the parts of the saved shards
        it now holds. Local."""
        meta = state_dicts[0][self._SHARD_META]
        mine = [[f.numel() for f in u.flat_params] for u in self._units]
        if [list(u.keys) for u in self._units] != meta["keys"]:
            raise ValueError("load_sharded_state_dicts: the checkpoint is of another model "
                             f"(units {meta['keys']}, this model {[u.keys for u in self._units]})")
        world = meta["world_size"]
        if only_mine:
            if mine != meta["flat_numel"]:
                raise ValueError("load_state_dict: a sharded state dict from a job of "
                                 f"{world} ranks; use load_sharded_state_dicts with every rank's")
            for u, unit in enumerate(self._units):
                for k, flat in enumerate(unit.flat_params):
                    with torch.no_grad():
                        flat.copy_(state_dicts[0][f"_flat_param.{u}.{k}"])
                unit.reshard()
                if unit.aliased:
                    unit.gathered = True
        else:
            if len(state_dicts) != world:
                raise ValueError(f"load_sharded_state_dicts: {len(state_dicts)} state dicts for a "
                                 f"checkpoint of {world} ranks")
            for u, unit in enumerate(self._units):
                saved = [sd[f"_flat_param.{u}.{k}"].contiguous()
                         for k in range(len(unit.flat_params)) for sd in state_dicts]
                views = [Borrowed(t) for t in saved]
                pointers = _lib.tensor_array(views)
                raise_for_status(lib.dk_shard_load_sharded, unit.handle, world, pointers,
                                 len(views))
                unit.reshard()
        self._load_buffers(state_dicts[0])
        return None

    def _load_buffers(self, state_dict) -> None:
        buffers = dict(self.module.named_buffers())
        for key, value in state_dict.items():
            if key in buffers:
                buffers[key].copy_(value)
