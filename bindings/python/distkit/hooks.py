"""mmengine hooks for distkit's wrappers.

``FSDPCheckpointHook`` makes mmengine's Runner (the classic one, unchanged)
save and resume a FullyShardedDataParallel model exactly at any number of
ranks, and resume at another number of ranks:

    custom_hooks = [dict(type='distkit.FSDPCheckpointHook')]

Why a hook is needed: ``Runner.save_checkpoint`` is master-only, so rank 0
alone builds the checkpoint (``model.module.state_dict()``,
``optim_wrapper.state_dict()``), and there it holds only its own shards of
the parameters and of the optimizer state; a gather there would wait for
ranks that never come. What every rank does call is
``runner.save_checkpoint`` itself (CheckpointHook calls it on every rank for
interval, last and best checkpoints; master_only filters inside). So the
hook, in ``before_run`` on every rank, wraps the runner's
``save_checkpoint``: each save first gathers the full model state and the
full optimizer state (per-element states at the original parameters'
shapes, under their names) to rank 0, one unit at a time, in CPU memory
(torch's FULL_STATE_DICT with rank0_only and offload_to_cpu; the other
ranks hold one unit at a time and keep nothing), then runs the Runner's
own save. In ``before_save_checkpoint`` (rank 0, before the file is
written) the hook puts the full states into the checkpoint in place of
rank 0's shards. The file is then what one process would have saved: the
original module's keys, and an optimizer state keyed by parameter names.

Resume: ``Runner.resume`` loads the file on every rank and calls
``after_load_checkpoint`` on every rank before loading anything; the hook
turns the full optimizer state into this rank's part
(FullyShardedDataParallel.optim_state_dict_to_load, local), which the
Runner's ``optim_wrapper.load_state_dict`` then loads; the model's full
parameters load through ``model.module``'s own load (each rank keeps its
part; fsdp/module_state.py). Neither needs a collective, and neither
depends on the saving job's size.

The Runner must call ``save_checkpoint`` on every rank (as CheckpointHook
does); called on rank 0 alone it would wait for the others. For any model
that is not a FullyShardedDataParallel the hook does nothing.
"""
import functools
import inspect
from typing import Dict, Optional, Tuple

import torch

from .fsdp import FullStateDictConfig, FullyShardedDataParallel, StateDictType
from .registry import DISTKIT_HOOKS

try:
    from mmengine.hooks import Hook
except ImportError:
    class Hook:
        """mmengine's Hook as far as FSDPCheckpointHook needs it (where
        mmengine is not installed, so a program can drive it as the Runner
        does)."""
        priority = "NORMAL"


def optim_wrappers(optim_wrapper) -> Dict[str, object]:
    """The built optim wrappers the Runner holds: name -> wrapper, '' for a
    single OptimWrapper (an OptimWrapperDict's checkpoint entry is a dict by
    name, a single one's is the state itself); {} while it is still a
    config."""
    many = getattr(optim_wrapper, "optim_wrappers", None)
    items = many.items() if isinstance(many, dict) else [("", optim_wrapper)]
    return {name: wrapper for name, wrapper in items
            if isinstance(getattr(wrapper, "optimizer", None), torch.optim.Optimizer)}


def _entry(saved: Optional[dict], name: str) -> Optional[dict]:
    """One optim wrapper's state in a checkpoint's 'optimizer' entry."""
    if not isinstance(saved, dict):
        return None
    return saved if name == "" else saved.get(name)


def is_full_optim_state(state: Optional[dict]) -> bool:
    """Whether an optimizer state dict is a full one (parameters named, as
    FullyShardedDataParallel.optim_state_dict gives), not a local one
    (parameters numbered, as torch's Optimizer.state_dict gives)."""
    groups = state.get("param_groups") if isinstance(state, dict) else None
    return bool(groups) and any(isinstance(p, str) for g in groups for p in g["params"])


@DISTKIT_HOOKS.register_module()
class FSDPCheckpointHook(Hook):
    """Full, world-size-independent checkpoints of a FullyShardedDataParallel
    under mmengine's Runner, and their resume (see the module's text).
    Runs first (VERY_HIGH), so later hooks' before_save_checkpoint see the
    full states."""

    priority = "VERY_HIGH"

    def __init__(self):
        self._staged: Optional[Tuple[dict, Dict[str, dict]]] = None

    @staticmethod
    def _model(runner) -> Optional[FullyShardedDataParallel]:
        model = getattr(runner, "model", None)
        return model if isinstance(model, FullyShardedDataParallel) else None

    def before_run(self, runner) -> None:
        model = self._model(runner)
        if model is None:
            return
        model._full_checkpoints = True  # MMFullyShardedDataParallel warns without it
        save = runner.save_checkpoint
        if getattr(save, "_gathers_fsdp_state", False):
            return
        signature = inspect.signature(save)

        @functools.wraps(save)
        def save_checkpoint(*args, **kwargs):
            arguments = signature.bind(*args, **kwargs).arguments
            self._staged = self._gather(runner, arguments.get("save_optimizer", True))
            try:
                return save(*args, **kwargs)
            finally:
                self._staged = None

        save_checkpoint._gathers_fsdp_state = True
        runner.save_checkpoint = save_checkpoint

    def _gather(self, runner, with_optimizer: bool) -> Optional[Tuple[dict, Dict[str, dict]]]:
        """Collective, every rank: the full model state and each optimizer's
        full state, kept on rank 0 alone (None elsewhere)."""
        model = self._model(runner)
        if model is None:
            return None
        config = FullStateDictConfig(offload_to_cpu=True, rank0_only=True)
        with FullyShardedDataParallel.state_dict_type(model, StateDictType.FULL_STATE_DICT,
                                                      config):
            state = model.state_dict()
        optims = {}
        if with_optimizer:
            for name, wrapper in optim_wrappers(runner.optim_wrapper).items():
                optims[name] = FullyShardedDataParallel.optim_state_dict(
                    model, wrapper.optimizer, rank0_only=True)
        return (state, optims) if state else None

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        """Rank 0, inside the Runner's save: the full states in place of rank
        0's shards (the entries optim wrappers add beside the optimizer's
        own, such as an AmpOptimWrapper's loss_scaler, are kept)."""
        if self._staged is None:
            return
        state, optims = self._staged
        metadata = getattr(checkpoint.get("state_dict"), "_metadata", None)
        if metadata is not None:
            state._metadata = metadata
        checkpoint["state_dict"] = state
        for name, full in optims.items():
            entry = _entry(checkpoint.get("optimizer"), name)
            if entry is not None:
                entry.update(state=full["state"], param_groups=full["param_groups"])

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        """Every rank, before the Runner loads anything: each full optimizer
        state becomes this rank's part of it (local). The model's full
        parameters need nothing: model.module's load keeps each rank's part.
        Before the optim wrapper is built (load_from) there is nothing to
        turn, and the Runner loads no optimizer state then."""
        model = self._model(runner)
        if model is None:
            return
        for name, wrapper in optim_wrappers(getattr(runner, "optim_wrapper", None)).items():
            entry = _entry(checkpoint.get("optimizer"), name)
            if is_full_optim_state(entry):
                mine = FullyShardedDataParallel.optim_state_dict_to_load(
                    model, wrapper.optimizer, entry)
                entry.update(state=mine["state"], param_groups=mine["param_groups"])
