"""FullyShardedDataParallel: torch's FSDP wrapper on distkit's FlatShard
engine; its state dicts are in state_dict.py and optim_state_dict.py."""
import os
from typing import Callable, Iterable, List, Optional, Set

import torch
from torch import nn

from .. import dist
from .._lib import lib
from ..dist.devices import move_to
from .optim_state_dict import OptimStateDictMixin
from .options import (BackwardPrefetch, CPUOffload, MixedPrecision, ShardingStrategy, cast_inputs,
                      shard_config)
from .scheduling import Coordinator
from .state_dict import ModelStateDictMixin
from .timeline import TimelineEvent
from . import module_state
from .clip import clip_sharded_grad_norm_, sharded_ids
from .wrap import layout, units_of


class FullyShardedDataParallel(ModelStateDictMixin, OptimStateDictMixin, nn.Module):
    """Shards ``module``'s parameters over ``process_group`` (default: the
    world). Arguments as torch's FSDP. Prefetch starts the next unit's
    all-gather early, so it runs while this unit computes:
    ``forward_prefetch`` when a unit's forward starts, ``BACKWARD_PRE`` when
    its backward starts, ``BACKWARD_POST`` when its gradients are complete
    (before their reduction). At most one unit is prefetched at a time, so
    ``limit_all_gathers`` holds whatever its value. take_timeline() shows
    the overlap. ``use_orig_params=True``: ``parameters()`` are the
    original parameters (1-D views of this rank's pieces) instead of one
    flat shard per unit and dtype."""

    def __init__(self, module: nn.Module, process_group=None,
                 sharding_strategy: Optional[ShardingStrategy] = None,
                 cpu_offload: Optional[CPUOffload] = None,
                 auto_wrap_policy: Optional[Callable] = None,
                 backward_prefetch: Optional[BackwardPrefetch] = BackwardPrefetch.BACKWARD_PRE,
                 mixed_precision: Optional[MixedPrecision] = None,
                 ignored_modules: Optional[Iterable[nn.Module]] = None,
                 param_init_fn: Optional[Callable[[nn.Module], None]] = None,
                 device_id=None, sync_module_states: bool = False,
                 forward_prefetch: bool = False, limit_all_gathers: bool = True,
                 use_orig_params: bool = False, replicate_group=None,
                 ignored_parameters: Optional[Iterable[nn.Parameter]] = None):
        super().__init__()
        strategy = _check_arguments(type(self).__name__, module, sharding_strategy, device_id)
        self.module = module
        self.sharding_strategy = strategy
        self.mixed_precision = mixed_precision
        if strategy in (ShardingStrategy.HYBRID_SHARD, ShardingStrategy._HYBRID_SHARD_ZERO2):
            if isinstance(process_group, tuple):  # torch's (intra-node, inter-node)
                process_group, replicate_group = process_group
            elif replicate_group is None:
                process_group, replicate_group = _hybrid_groups()
        ignored = set()
        for m in ignored_modules or []:
            ignored.update(m.modules())
        if param_init_fn is not None:
            for m in module.modules():
                if any(p.is_meta for p in m.parameters(recurse=False)):
                    param_init_fn(m)
        if device_id is not None:
            # torch's FSDP: the module moves to device_id before sharding.
            module.to(torch.device("cuda", device_id) if isinstance(device_id, int)
                      else torch.device(device_id))
        self._sync_module_states = sync_module_states
        param_dtype = mixed_precision.param_dtype if mixed_precision else None
        config = shard_config(strategy, param_dtype,
                              mixed_precision.reduce_dtype if mixed_precision else None,
                              cpu_offload is not None and cpu_offload.offload_params,
                              sync_module_states, replicate_group)
        # Keys of the full state dict, in the original order, and every key
        # of each tensor: a tied parameter (or a module registered twice)
        # has several, the first of them its named_parameters() name.
        state = module.state_dict(keep_vars=True)
        self._keys = list(state.keys())
        names = _names(module, state)
        # key -> the first key of the same tensor, for its other keys.
        self._tied = {k: ks[0] for ks in names.values() for k in ks[1:]}
        path_of = {id(m): name for name, m in module.named_modules()}
        param_name = {id(p): name for name, p in module.named_parameters()}
        reshard = strategy in (ShardingStrategy.FULL_SHARD, ShardingStrategy.HYBRID_SHARD)
        claimed: Set[int] = {id(p) for p in ignored_parameters or []}  # left alone
        # torch's ignored_modules: their parameters are left alone, also
        # where they are registered on another module too.
        claimed.update(id(p) for m in ignored for p in m.parameters(recurse=False))
        self._coordinator = Coordinator(strategy != ShardingStrategy.NO_SHARD,
                                        forward_prefetch, backward_prefetch)
        unit_modules = units_of(module, auto_wrap_policy, ignored)
        # Each parameter in one unit, and its further places (one walk).
        for unit_module, (owned, aliases) in zip(unit_modules,
                                                 layout(module, unit_modules, ignored, claimed)):
            if not owned:
                continue
            # The library's errors name each parameter by its path in the
            # wrapped module (blocks.1.linear.weight), as C++'s do.
            paths = [param_name.get(id(p), f"{type(m).__name__}.{n}") for m, n, p in owned]
            unit = self._coordinator.add(unit_module, owned, process_group, config, param_dtype,
                                         reshard and unit_module is not module,
                                         unit_module is module, use_orig_params, aliases,
                                         paths)
            # A parameter with no state-dict key (a hook renamed or left it
            # out): its named_parameters() name.
            unit.keys = [names.get(id(p), [param_name.get(id(p))])[0] for _, _, p in owned]
            # (key, i): owned[i]'s further state-dict keys.
            unit.alias_keys = [(k, i) for i, (_, _, p) in enumerate(owned)
                               for k in names.get(id(p), [])[1:]]
            unit.path = path_of[id(unit_module)]
        self._units = self._coordinator.units
        self._coordinator.watch_recompute()
        self._group = process_group
        self._replicate_group = replicate_group
        self.use_orig_params = use_orig_params
        # After the units (each broadcast its parameters when it was made),
        # as C++'s Build: one model in a job of both languages makes the
        # same collectives in the same order.
        self._sync_buffers(module, process_group, replicate_group)
        # MixedPrecision.buffer_dtype: floating buffers live (and forward
        # uses them) in it; state dicts give them in their own dtype, as
        # torch's full state dict does.
        self._buffer_dtypes = {}
        if mixed_precision is not None and mixed_precision.buffer_dtype is not None:
            for name, b in module.named_buffers():
                if b.is_floating_point():
                    self._buffer_dtypes[name] = b.dtype
                    b.data = b.data.to(mixed_precision.buffer_dtype)
        # What the optimizer steps, in the module (so the wrapper's and the
        # module's parameters() are the same): each unit's flat shards,
        # registered on the unit's module, or (use_orig_params) the original
        # parameters, each a view of this rank's piece.
        self._sharded_ids = sharded_ids(self._units, use_orig_params)
        # The module's own state dict: local, safe for mmengine's Runner.
        module_state.install(module, self._units, use_orig_params)

    def _sync_buffers(self, module: nn.Module, process_group, replicate_group=None) -> None:
        """sync_module_states, once the units are made: rank 0's values on
        every rank (collective) of the parameters no unit holds (ignored),
        then of the buffers, each in module order, as C++'s Build does
        (BroadcastFromRank0): each tensor over the replicate group first
        (HYBRID_*: from the job's rank 0 to rank 0 of every node), then
        inside its shard group."""
        if not self._sync_module_states:
            return
        held = self._held_ids()
        tensors = [p.data for p in module.parameters() if id(p) not in held]
        tensors += list(module.buffers())
        groups = [g for g in ([replicate_group] if replicate_group is not None else []) +
                  [process_group] if dist.get_world_size(g) > 1]
        for t in tensors:
            for group in groups:
                dist.broadcast(t, dist.get_global_rank(group, 0), group)

    def regroup(self, process_group=None) -> None:
        """Collective over the new group: after a shrink or a grow
        (distkit.elastic does it), every unit shards over ``process_group``
        (default: the default group) instead, with the same parameter
        objects; their values must then be loaded (load_sharded_state_dicts
        re-shards from the old layout). FULL_SHARD and SHARD_GRAD_OP only:
        a hybrid layout's two groups would both have to change."""
        if self._replicate_group is not None:
            raise ValueError("FullyShardedDataParallel.regroup: hybrid sharding "
                             f"({self.sharding_strategy.name}) cannot change groups")
        self._coordinator.forget_backward()  # a failed step's queued work never ran
        # The collectives a construction on the new group makes, in its
        # order (the units, then the buffers), so a replacement's
        # constructor and the survivors' regroup pair up.
        for unit in self._units:
            unit.regroup(process_group)
        self._sync_buffers(self.module, process_group)
        self._group = process_group

    def forward(self, *args, **kwargs):
        if self._units and self._units[0].device.type == "cuda":
            # torch's FSDP: inputs follow the parameters to their device.
            device = self._units[0].device
            args, kwargs = move_to(args, device), move_to(kwargs, device)
        if self.mixed_precision is not None and self.mixed_precision.param_dtype is not None:
            args, kwargs = cast_inputs(self.mixed_precision.param_dtype, args, kwargs)
        return self._coordinator.run_forward(lambda: self.module(*args, **kwargs))

    def clip_grad_norm_(self, max_norm: float, norm_type: float = 2.0) -> torch.Tensor:
        """torch's FSDP.clip_grad_norm_: scales every gradient the optimizer
        sees so that the norm over all of them, every rank's shards together,
        is at most ``max_norm``; returns that total norm (before clipping,
        the same on every rank). Call it after backward, before the step, on
        every rank (collective over the shard group)."""
        return self._clip(self.parameters(), max_norm, norm_type)

    def _clip(self, params, max_norm: float, norm_type: float = 2.0,
              error_if_nonfinite: bool = False, foreach=None) -> torch.Tensor:
        """clip_grad_norm_ over `params` (what an optimizer holds), with
        torch.nn.utils.clip_grad_norm_'s call form: mmengine's OptimWrapper
        calls it so. error_if_nonfinite as torch's (the total is the same on
        every rank, so every rank raises); foreach is ignored."""
        if isinstance(params, torch.Tensor):
            params = [params]
        return clip_sharded_grad_norm_(params, self._sharded_ids, self._group, max_norm,
                                       norm_type, error_if_nonfinite)

    def no_sync(self):
        """Gradients accumulate locally (full size) and are reduced with the
        first backward after the context."""
        return self._coordinator.no_sync()

    def take_timeline(self) -> List[TimelineEvent]:
        """What happened since the last call, in time order: each unit's
        gathers, frees and reductions (from the library) and its forward
        and backward compute (see TimelineEvent; prefetch_overlap(timeline)
        sums up how far the gathers overlapped compute). The newest 4096
        events per unit are kept."""
        events = [TimelineEvent(u, kind, ns)
                  for u, unit in enumerate(self._units) for kind, ns in unit.take_events()]
        events.extend(TimelineEvent(*e) for e in self._coordinator.compute)
        self._coordinator.compute.clear()
        return sorted(events, key=lambda e: e.unix_ns)

    def held_bytes(self) -> dict:
        """What the library holds for this model's units: {"now", "peak"}
        (shards, shard gradients and, while gathering, full buffers)."""
        return {"now": sum(lib.dk_shard_held_bytes(u.handle) for u in self._units),
                "peak": sum(lib.dk_shard_peak_held_bytes(u.handle) for u in self._units)}


def _names(module: nn.Module, state: dict) -> dict:
    """id(tensor) -> its keys in `state` (module.state_dict(keep_vars=True):
    the tensors themselves), in state-dict order, for every parameter and
    buffer: several for one registered in several places (tied weights, a
    module under two names). Found by identity, so keys a state-dict hook
    renamed (torch's checkpoint_wrapper drops "_checkpoint_wrapped_module.")
    belong to their tensors too; where no path gives the key, the key a
    module path gives comes first (the named_parameters() name)."""
    out: dict = {}
    for key, t in state.items():
        if isinstance(t, torch.Tensor):
            out.setdefault(id(t), []).append(key)
    paths = set()
    for path, m in module.named_modules(remove_duplicate=False):
        for name, t in list(m._parameters.items()) + list(m._buffers.items()):
            if t is not None:
                paths.add((id(t), f"{path}.{name}" if path else name))
    for i, keys in out.items():  # a key under a module path first
        keys.sort(key=lambda k, i=i: (i, k) not in paths)
    return out


def _check_arguments(owner: str, module, sharding_strategy, device_id) -> ShardingStrategy:
    """The sharding strategy (a ShardingStrategy or its name; default
    FULL_SHARD), or ValueError / TypeError naming the argument, before any
    collective: with the same arguments on every rank (one config), every
    rank raises it. No collective of its own, so the wrapper makes the same
    calls as the other languages' (one model may span a mixed job)."""
    problem = None
    strategy = sharding_strategy if sharding_strategy is not None else ShardingStrategy.FULL_SHARD
    if isinstance(strategy, str):
        if strategy in ShardingStrategy.__members__:
            strategy = ShardingStrategy[strategy]
        else:
            problem = (f"sharding_strategy {strategy!r} is not a sharding strategy; use one of "
                       f"{', '.join(ShardingStrategy.__members__)}")
    elif not isinstance(strategy, ShardingStrategy):
        problem = (f"sharding_strategy must be a ShardingStrategy or its name, got "
                   f"{strategy!r}")
    if problem is None and not isinstance(module, nn.Module):
        problem = f"module must be a torch.nn.Module, got {type(module).__name__}"
    elif problem is None and not any(True for _ in module.parameters()):
        problem = (f"module ({type(module).__name__}) has no parameters: there is nothing "
                   "to shard")
    if problem is None and device_id is not None:
        device = (torch.device("cuda", device_id) if isinstance(device_id, int)
                  else torch.device(device_id))
        if device.type == "cuda" and not torch.cuda.is_available():
            problem = (f"device_id={device_id!r} names a CUDA device, but this machine has "
                       "none (torch.cuda.is_available() is False); leave device_id unset "
                       "on CPU")
    if problem is not None:
        kind = ValueError
        if problem.startswith(("sharding_strategy must", "module must")):
            kind = TypeError
        elif problem.startswith("sharding_strategy"):
            kind = UnknownShardingStrategy
        raise kind(f"{owner}: {problem}")
    return strategy


class UnknownShardingStrategy(ValueError, KeyError):
    """A sharding_strategy name that is none: a ValueError, and the KeyError
    mmengine's ``ShardingStrategy[name]`` raises, with the message as it is."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def _hybrid_groups():
    """(this node's group, this rank's replicate group) for HYBRID_SHARD:
    nodes are blocks of LOCAL_WORLD_SIZE consecutive ranks (torchrun and
    distrun set it), the replicate group holds the ranks with the same local
    rank on every node. Collective over the world."""
    world = dist.get_world_size()
    local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    if local <= 0 or world % local != 0:
        raise ValueError(f"HYBRID_SHARD: LOCAL_WORLD_SIZE {local} does not divide the world "
                         f"size {world}")
    rank, nodes = dist.get_rank(), world // local
    mine = [None, None]
    for n in range(nodes):
        g = dist.new_group(list(range(n * local, (n + 1) * local)))
        if rank // local == n:
            mine[0] = g
    for i in range(local):
        g = dist.new_group([n * local + i for n in range(nodes)])
        if rank % local == i:
            mine[1] = g
    return mine[0], mine[1]

