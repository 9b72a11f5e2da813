"""Fully sharded data parallel for torch modules, on distkit's FlatShard
engine (the ABI's dk_shard_*). torch's own FSDP cannot be imported on this
platform (Debian's torch 1.13 with Python 3.11), so this package also provides
its configuration types under torch's names.

    from distkit.fsdp import FullyShardedDataParallel, ShardingStrategy
    model = FullyShardedDataParallel(model, auto_wrap_policy=ModuleWrapPolicy({Block}))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)   # steps the local shards

Each wrapped unit (one per module the auto-wrap policy picks, plus the root
for the rest) keeps only its shard between uses: its forward gathers the
full parameters into torch-owned storage, FULL_SHARD frees that storage
after forward and gathers it again when backward reaches the unit, and at
the end of backward every unit's gradients are averaged into its shard
gradient in C++. ``parameters()`` are the shards: one flat parameter per
unit and dtype (use_orig_params=False), registered on the unit's module as
torch's FSDP registers it (``_flat_param``), or, with use_orig_params=True,
the original parameters, each a 1-D view of the part of it this rank holds,
so optimizer parameter groups by name work and optimizer state is sharded
too. Either way they are the wrapped module's parameters, so an optimizer
built from ``model.module.parameters()`` (mmengine's) steps them.
``state_dict()`` is the full state dict under the original module's keys;
``clip_grad_norm_`` clips by the norm over every rank's shards.

The modules:
  options            torch's configuration types (ShardingStrategy, MixedPrecision, ...)
  wrap               auto-wrap policies: which modules become units
  unit               one unit at run time: gather, free, expose to autograd, reduce
  scheduling         when each unit gathers, frees and reduces (hooks, prefetch)
  memory             bytes of sharded model state (memory_stats)
  timeline           take_timeline()'s events and prefetch_overlap
  fully_sharded      FullyShardedDataParallel
  clip               gradient clipping by the norm over every shard
  state_dict         its model state dicts and sharded checkpoints
  checkpoint_format  the sharded checkpoint's keys and files (shared with C++)
  module_state       the wrapped module's own state dict (mmengine's Runner uses it)
  optim_state_dict   its optimizer state dicts
  composable         FSDP2's fully_shard
"""
from .composable import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, fully_shard
from .fully_sharded import FullyShardedDataParallel
from .grad_scaler import ShardedGradScaler
from .memory import memory_stats, reset_peak_memory_stats
from .options import (BackwardPrefetch, CPUOffload, FullStateDictConfig, MixedPrecision,
                      ShardingStrategy, StateDictType)
from .timeline import TimelineEvent, prefetch_overlap
from .wrap import ModuleWrapPolicy, size_based_auto_wrap_policy, transformer_auto_wrap_policy

__all__ = [
    "BackwardPrefetch", "CPUOffload", "CPUOffloadPolicy", "FSDPModule", "FullyShardedDataParallel",
    "FullStateDictConfig", "MixedPrecision", "MixedPrecisionPolicy", "fully_shard", "TimelineEvent",
    "ModuleWrapPolicy", "ShardedGradScaler", "ShardingStrategy", "StateDictType", "memory_stats", "prefetch_overlap",
    "reset_peak_memory_stats", "size_based_auto_wrap_policy",
    "transformer_auto_wrap_policy",
]
