"""mmengine's MMFullyShardedDataParallel on distkit.fsdp: config-file values
(strings, dicts, names) turned into FSDP objects with mmengine's rules and
messages, and mmengine's train_step / val_step / test_step (val and test run
the sharded forward in 'predict' mode, so they are collective)."""
import warnings
from functools import partial
from typing import Callable, Dict, Iterable, Optional, Union

import torch
from torch import nn

from . import dist, fsdp
from ._model_steps import parse_losses, run_forward
from .fsdp.grad_scaler import agreeing
from .fsdp import (BackwardPrefetch, CPUOffload, FullyShardedDataParallel, MixedPrecision,
                   ShardingStrategy)
from .registry import FUNCTIONS

for _policy in (fsdp.size_based_auto_wrap_policy, fsdp.transformer_auto_wrap_policy,
                fsdp.ModuleWrapPolicy):
    FUNCTIONS.register_module(module=_policy, force=True)
    FUNCTIONS.register_module(name=f"torch.distributed.fsdp.wrap.{_policy.__name__}",
                              module=_policy, force=True)


def _parse_dtype(dtype):
    if dtype is None:
        return None
    if isinstance(dtype, str):
        return getattr(torch, dtype)
    if isinstance(dtype, torch.dtype):
        return dtype
    raise TypeError(f"`dtype` should be `None`, `str` or `torch.dtype`, but has type {type(dtype)}")


def _from_registry(value, what: str) -> Optional[Callable]:
    """A str names a registered callable; a dict is its ``type`` plus
    keyword arguments (bound with partial)."""
    if isinstance(value, str):
        found = FUNCTIONS.get(value)
        if found is None:
            raise ValueError(f"`{what}` is not registered!")
        return found
    if isinstance(value, dict):
        value = dict(value)
        kind = value.pop("type")
        if isinstance(kind, str):
            if (what == "auto_wrap_policy" and kind.endswith("transformer_auto_wrap_policy")
                    and "transformer_layer_cls" in value):
                layers = value.pop("transformer_layer_cls")
                layers = layers if isinstance(layers, (list, tuple, set)) else [layers]
                value["transformer_layer_cls"] = {
                    FUNCTIONS.get(c) if isinstance(c, str) else c for c in layers}
            kind = FUNCTIONS.get(kind)
        if kind is None:
            raise ValueError(f"`{what}` is not registered!")
        if isinstance(kind, type):  # a policy class (ModuleWrapPolicy): an instance
            return kind(**value)
        return partial(kind, **value)
    return value


def _by_name(named: dict, items, kind: type, kind_text: str):
    """mmengine's ignored_parameters / ignored_modules: names become the
    objects; anything but names or ``kind`` objects is a TypeError (mmengine
    names `ignored_modules` in both messages)."""
    if items is not None and all(isinstance(x, str) for x in items):
        items = [named[name] for name in items]
    if items is not None and not all(isinstance(x, kind) for x in items):
        raise TypeError("`ignored_modules` should be `None`, `Iterable[str]` or "
                        f"{kind_text}, but has type {type(items)}")
    return items


def _clip_globally(optim_wrapper, model: FullyShardedDataParallel) -> None:
    """mmengine's OptimWrapper keeps its norm clipping in ``clip_func``
    (torch.nn.utils.clip_grad_norm_, called with the optimizer's parameters
    and the clip_grad arguments): replaced by `model`'s clip over every
    shard. Other wrappers and value clipping (per element: the same on a
    shard) are left alone."""
    for wrapper in getattr(optim_wrapper, "optim_wrappers", {"": optim_wrapper}).values():
        if getattr(wrapper, "clip_func", None) is torch.nn.utils.clip_grad_norm_:
            wrapper.clip_func = model._clip


def _agree_on_skipped_steps(optim_wrapper) -> None:
    """mmengine's AmpOptimWrapper skips a step when its ``loss_scaler``
    finds an inf or a NaN in the gradients the optimizer holds, which here
    are this rank's shards: a torch GradScaler becomes a ShardedGradScaler
    (the found-inf all-reduced over the world, as torch's sharded scaler
    does, with the scaler's settings and state), so every rank skips the
    same steps and keeps the same scale."""
    for wrapper in getattr(optim_wrapper, "optim_wrappers", {"": optim_wrapper}).values():
        scaler = getattr(wrapper, "loss_scaler", None)
        if scaler is not None:
            wrapper.loss_scaler = agreeing(scaler)


class MMFullyShardedDataParallel(FullyShardedDataParallel):
    """mmengine's MMFullyShardedDataParallel (the seed's signature and
    defaults: use_orig_params=False)."""

    def __init__(self, module: nn.Module, process_group=None,
                 sharding_strategy: Union[str, ShardingStrategy, None] = None,
                 cpu_offload: Union[bool, CPUOffload, None] = None,
                 auto_wrap_policy: Union[str, dict, Callable, None] = None,
                 backward_prefetch: Union[str, BackwardPrefetch, None] = None,
                 mixed_precision: Union[dict, MixedPrecision, None] = None,
                 ignored_modules: Union[Iterable[str], Iterable[nn.Module], None] = None,
                 param_init_fn: Union[str, dict, Callable, None] = None,
                 device_id: Optional[int] = None, sync_module_states: bool = False,
                 forward_prefetch: bool = False, limit_all_gathers: bool = True,
                 use_orig_params: bool = False, **kwargs):
        # A name that is no strategy: FullyShardedDataParallel says so on
        # every rank (ValueError naming sharding_strategy).
        if isinstance(sharding_strategy, str) and sharding_strategy in ShardingStrategy.__members__:
            sharding_strategy = ShardingStrategy[sharding_strategy]
        if not (isinstance(sharding_strategy, (ShardingStrategy, str)) or
                sharding_strategy is None):
            raise TypeError("sharding_strategy must be str or enum of `ShardingStrategy` , "
                            f"but got {sharding_strategy}")
        if isinstance(cpu_offload, bool):
            cpu_offload = CPUOffload(offload_params=cpu_offload)
        if not (isinstance(cpu_offload, CPUOffload) or cpu_offload is None):
            raise TypeError("`cpu_offload` should be `None`, `bool`"
                            f"or `CPUOffload`, but has type {type(cpu_offload)}")
        auto_wrap_policy = _from_registry(auto_wrap_policy, "auto_wrap_policy")
        if not (auto_wrap_policy is None or callable(auto_wrap_policy)):
            raise TypeError("`auto_wrap_policy` should be a str, a callable, a dict or None, "
                            f"but has type {type(auto_wrap_policy)}")
        if isinstance(backward_prefetch, str):
            backward_prefetch = BackwardPrefetch[backward_prefetch]
        if not (isinstance(backward_prefetch, BackwardPrefetch) or backward_prefetch is None):
            raise TypeError('`backward_prefetch` should be `None`, string of "BACKWARD_PRE" and '
                            '"BACKWARD_POST", or `BackwardPrefetch`, but has type '
                            f"{type(backward_prefetch)}")
        param_init_fn = _from_registry(param_init_fn, "param_init_fn")
        if not (callable(param_init_fn) or param_init_fn is None):
            raise TypeError("`param_init_fn` should be a str, a callable, a dict or None, but "
                            f"has type {type(param_init_fn)}")
        if isinstance(mixed_precision, dict):
            mixed_precision = MixedPrecision(
                param_dtype=_parse_dtype(mixed_precision.get("param_dtype")),
                reduce_dtype=_parse_dtype(mixed_precision.get("reduce_dtype")),
                buffer_dtype=_parse_dtype(mixed_precision.get("buffer_dtype")))
        elif not (isinstance(mixed_precision, MixedPrecision) or mixed_precision is None):
            raise TypeError("`mixed_precision` should be `None`, `dict` or `MixedPrecision`, "
                            f"but has type {type(mixed_precision)}")
        if "ignored_parameters" in kwargs:
            kwargs["ignored_parameters"] = self._get_ignored_params(
                module, kwargs["ignored_parameters"])
        ignored_modules = self._get_ignored_modules(module, ignored_modules)
        super().__init__(module, process_group=process_group,
                         sharding_strategy=sharding_strategy, cpu_offload=cpu_offload,
                         auto_wrap_policy=auto_wrap_policy, backward_prefetch=backward_prefetch,
                         mixed_precision=mixed_precision, ignored_modules=ignored_modules,
                         param_init_fn=param_init_fn, device_id=device_id,
                         sync_module_states=sync_module_states,
                         forward_prefetch=forward_prefetch, limit_all_gathers=limit_all_gathers,
                         use_orig_params=use_orig_params, **kwargs)

    @staticmethod
    def _get_ignored_params(module: nn.Module, ignored):
        return _by_name(dict(module.named_parameters()), ignored, nn.Parameter,
                        "`Iterable[nn.Parameters]`")

    @staticmethod
    def _get_ignored_modules(module: nn.Module, ignored):
        return _by_name(dict(module.named_modules()), ignored, nn.Module, "`Iterable[nn.Module]`")

    def train_step(self, data, optim_wrapper) -> Dict[str, torch.Tensor]:
        """mmengine's: preprocess, forward in 'loss' mode, parse the losses,
        ``optim_wrapper.update_params``. An OptimWrapper built with
        ``clip_grad=dict(max_norm=...)`` (type 'norm') clips with
        torch.nn.utils.clip_grad_norm_ over the optimizer's parameters,
        which here are shards: its ``clip_func`` becomes this model's
        clip over all shards (the global norm, the same on every rank). An
        AmpOptimWrapper's GradScaler becomes a ShardedGradScaler, so a step
        one rank's overflow skips is skipped on every rank."""
        _clip_globally(optim_wrapper, self)
        _agree_on_skipped_steps(optim_wrapper)
        self._warn_about_checkpoints()
        with optim_wrapper.optim_context(self):
            data = self.module.data_preprocessor(data, training=True)
            losses = run_forward(self, data, "loss", expected="list tuple or dict")
        preds = masks = None
        if isinstance(losses, tuple) and len(losses) == 3:  # mmpretrain
            losses, preds, masks = losses
        elif isinstance(losses, tuple) and len(losses) == 2:  # mmpose, mmseg
            losses, preds = losses
        parse = getattr(self.module, "parse_losses", parse_losses)
        parsed_loss, log_vars = parse(losses)
        optim_wrapper.update_params(parsed_loss)
        if preds is not None and masks is not None:
            log_vars["vis_preds"] = preds
            log_vars["vis_masks"] = masks
        elif preds is not None:
            log_vars["vis_preds"] = preds
        return log_vars

    def _warn_about_checkpoints(self) -> None:
        """Once, on rank 0: the Runner's own checkpoints of a model split
        over ranks hold rank 0's shards alone unless distkit's
        FSDPCheckpointHook (which marks the model in before_run) runs."""
        if getattr(self, "_full_checkpoints", False) or getattr(self, "_warned", False):
            return
        self._warned = True
        if dist.get_rank() == 0 and any(unit.shard_count > 1 for unit in self._units):
            warnings.warn(
                "MMFullyShardedDataParallel: mmengine's Runner saves checkpoints on rank 0 "
                "alone, which holds only its own shards; add custom_hooks=[dict(type="
                "'distkit.FSDPCheckpointHook')] for full checkpoints that resume exactly")

    def val_step(self, data) -> list:
        data = self.module.data_preprocessor(data, False)
        return self._run_forward(data, mode="predict")

    def test_step(self, data) -> list:
        data = self.module.data_preprocessor(data, False)
        return self._run_forward(data, mode="predict")

    def _run_forward(self, data, mode: str):
        return run_forward(self, data, mode)
