"""Fully sharded data parallel for torch modules, on distkit's FlatShard
engine (the ABI's dk_shard_*). torch's own FSDP cannot be imported on this
platform (Debian's torch 1.13 with Python 3.11), so this module also provides
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
unit and dtype (use_orig_params=False), or, with use_orig_params=True, the
original parameters, each a 1-D view of the part of it this rank holds, so
optimizer parameter groups by name work and optimizer state is sharded
too. ``state_dict()`` is the full state dict under the original module's
keys.
"""
import collections
import contextlib
import ctypes
import enum
import os
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Iterable, List, Optional, Set, Type

import torch
from torch import nn

from . import _lib, dist
from ._dlpack import Borrowed
from ._memory import tensor_at
from .dist.devices import move_to
from ._lib import check, lib

__all__ = [
    "BackwardPrefetch", "CPUOffload", "CPUOffloadPolicy", "FSDPModule", "FullyShardedDataParallel",
    "MixedPrecision", "MixedPrecisionPolicy", "fully_shard", "TimelineEvent",
    "ModuleWrapPolicy", "ShardingStrategy", "StateDictType", "memory_stats", "prefetch_overlap",
    "reset_peak_memory_stats", "size_based_auto_wrap_policy",
    "transformer_auto_wrap_policy",
]


class ShardingStrategy(enum.Enum):
    FULL_SHARD = _lib.SHARD_FULL_SHARD
    SHARD_GRAD_OP = _lib.SHARD_SHARD_GRAD_OP
    NO_SHARD = _lib.SHARD_NO_SHARD
    HYBRID_SHARD = _lib.SHARD_HYBRID_SHARD
    _HYBRID_SHARD_ZERO2 = _lib.SHARD_HYBRID_SHARD_ZERO2


class BackwardPrefetch(enum.Enum):
    BACKWARD_PRE = enum.auto()
    BACKWARD_POST = enum.auto()


class TimelineEvent(collections.namedtuple("TimelineEvent", "unit kind unix_ns")):
    """One entry of FullyShardedDataParallel.take_timeline(): unit index
    (wrapping order), what happened, and when (ns since the Unix epoch, as
    time.time_ns()). Kinds: from the library "unshard_start",
    "unshard_done" (a gather started, and waited for), "reshard",
    "reduce_start", "reduce_done"; from the wrapper "forward_start",
    "forward_end", "backward_start", "backward_end" (the unit's compute)."""


_EVENT_KINDS = {_lib.SHARD_EVENT_UNSHARD_START: "unshard_start",
                _lib.SHARD_EVENT_UNSHARD_DONE: "unshard_done",
                _lib.SHARD_EVENT_RESHARD: "reshard",
                _lib.SHARD_EVENT_REDUCE_START: "reduce_start",
                _lib.SHARD_EVENT_REDUCE_DONE: "reduce_done"}


def prefetch_overlap(timeline: List[TimelineEvent]) -> dict:
    """How far all-gathers ran beside compute in `timeline`: "gathers"
    counted (started and waited for), "overlapped" those during which
    another unit's compute started or ended (a prefetched gather; a blocking
    one has none), and "overlap_ns" the sum, over those, of the time from
    the gather's start to the last such compute mark inside it."""
    gathers, marks, started = [], [], {}
    for e in timeline:
        if e.kind == "unshard_start":
            started[e.unit] = e.unix_ns
        elif e.kind == "unshard_done" and e.unit in started:
            gathers.append((e.unit, started.pop(e.unit), e.unix_ns))
        elif e.kind.startswith(("forward_", "backward_")):
            marks.append((e.unit, e.unix_ns))
    overlapped, total = 0, 0
    for unit, start, end in gathers:
        inside = [ns for u, ns in marks if u != unit and start <= ns <= end]
        if inside:
            overlapped += 1
            total += max(inside) - start
    return {"gathers": len(gathers), "overlapped": overlapped, "overlap_ns": total}


class StateDictType(enum.Enum):
    FULL_STATE_DICT = enum.auto()
    LOCAL_STATE_DICT = enum.auto()
    SHARDED_STATE_DICT = enum.auto()


@dataclass
class CPUOffload:
    offload_params: bool = False


@dataclass
class MixedPrecision:
    param_dtype: Optional[torch.dtype] = None
    reduce_dtype: Optional[torch.dtype] = None
    buffer_dtype: Optional[torch.dtype] = None


_DK_DTYPE = {torch.float16: 0, torch.bfloat16: 1, torch.float32: 2, torch.float64: 3}
_TORCH_DTYPE = {v: k for k, v in _DK_DTYPE.items()}


# ---- auto-wrap policies (torch's call convention) --------------------------------


def size_based_auto_wrap_policy(module: nn.Module, recurse: bool, nonwrapped_numel: int,
                                min_num_params: int = int(1e8)) -> bool:
    """Wraps a module whose not-yet-wrapped parameters number at least
    ``min_num_params``."""
    return True if recurse else nonwrapped_numel >= min_num_params


def transformer_auto_wrap_policy(module: nn.Module, recurse: bool, nonwrapped_numel: int,
                                 transformer_layer_cls: Set[Type[nn.Module]]) -> bool:
    """Wraps every module of the given (layer) types."""
    return True if recurse else isinstance(module, tuple(transformer_layer_cls))


class ModuleWrapPolicy:
    """Wraps every module whose type is in ``module_classes``."""

    def __init__(self, module_classes: Iterable[Type[nn.Module]]):
        self._classes = tuple(module_classes)

    def __call__(self, module: nn.Module, recurse: bool, nonwrapped_numel: int) -> bool:
        return True if recurse else isinstance(module, self._classes)


def _units_of(root: nn.Module, policy: Optional[Callable], ignored: Set[nn.Module]) -> List[nn.Module]:
    """The modules that become units, children before parents, root last."""
    units: List[nn.Module] = []

    def visit(module: nn.Module) -> int:
        """Returns the number of parameters under `module` not yet wrapped."""
        if module in ignored:
            return 0
        remaining = sum(p.numel() for p in module.parameters(recurse=False))
        for child in module.children():
            if policy is None or policy(module=child, recurse=True, nonwrapped_numel=0):
                remaining += visit(child)
            else:
                remaining += sum(p.numel() for p in child.parameters())
        if module is not root and policy is not None and remaining > 0 and policy(
                module=module, recurse=False, nonwrapped_numel=remaining):
            units.append(module)
            return 0
        return remaining

    visit(root)
    units.append(root)
    return units


def _free(t: torch.Tensor) -> None:
    t.storage().resize_(0)


def _alloc(t: torch.Tensor) -> None:
    if t.storage().size() == 0:
        t.storage().resize_(t.numel())


def _alias(t: torch.Tensor) -> torch.Tensor:
    """`t`'s memory under a tensor with its own version counter: refilling
    the full parameters between forward and backward must not look like an
    in-place change to the tensors autograd saved."""
    alias = torch.empty(0, dtype=t.dtype, device=t.device)
    return alias.set_(t.storage(), t.storage_offset(), t.size(), t.stride())


# Bytes of gathered full parameters alive now and at most (for benchmarks:
# what sharding saves is visible here; the shards live in the library,
# dk_shard_held_bytes).
_full_bytes = {"now": 0, "peak": 0}


_live_units = weakref.WeakSet()
_held = {"peak": 0}


def _sample_memory() -> None:
    """Records the model state held right now (library + torch storage)."""
    now = _full_bytes["now"] + sum(lib.dk_shard_held_bytes(u.handle) for u in list(_live_units)
                                   if u.handle)
    _held["peak"] = max(_held["peak"], now)


def memory_stats() -> dict:
    """Bytes of sharded model state, now and at most since the last
    reset_peak_memory_stats(): "full_now" / "full_peak", the gathered full
    parameters in torch storage; "held_peak", those plus what the library
    holds for every unit (shards, shard gradients, full gradients, gather
    buffers) at the same moment."""
    return {"full_now": _full_bytes["now"], "full_peak": _full_bytes["peak"],
            "held_peak": _held["peak"]}


def reset_peak_memory_stats() -> None:
    _full_bytes["peak"] = _full_bytes["now"]
    _held["peak"] = 0
    _sample_memory()


class _Unit:
    """One sharded unit: its parameters' places in the module tree, the
    dk_shard_t, the shard parameters the optimizer sees, and the torch-owned
    storage the full parameters live in while gathered."""

    def __init__(self, module: nn.Module, owned: List[tuple], group, config, compute_dtype,
                 reshard_after_forward: bool, is_root: bool, orig_params: bool = False):
        self.module = module
        self.orig_params = orig_params
        # The group the unit shards over and this rank's place in it.
        self.group = group
        sharded = config.strategy != _lib.SHARD_NO_SHARD and dist.is_distributed()
        self.shard_count = dist.get_world_size(group) if sharded else 1
        self.shard_rank = dist.get_rank(group) if sharded else 0
        self.owned = owned  # (owner module, attribute name, original Parameter)
        self.is_root = is_root
        self.reshard_after_forward = reshard_after_forward
        params = [p for _, _, p in owned]
        # The library keeps full parameters and gradients on the parameters'
        # device, the shard there too unless it is offloaded to the host.
        self.device = params[0].device if params else torch.device("cpu")
        self.shard_device = torch.device("cpu") if config.offload_params else self.device
        views = [Borrowed(p.detach().contiguous()) for p in params]
        pointers = _lib.tensor_array(views)
        names = (ctypes.c_char_p * len(owned))(
            *[f"{type(m).__name__}.{n}".encode() for m, n, _ in owned])
        self.handle = ctypes.c_void_p()
        check(lib.dk_shard_create, dist.groups.handle_of(group), pointers, len(views), names,
              ctypes.byref(config), ctypes.byref(self.handle))
        # Where each parameter lies: flats by dtype in first-use order.
        dtypes: List[torch.dtype] = []
        self.place = []
        self.flat_numel: List[int] = []
        for p in params:
            if p.dtype not in dtypes:
                dtypes.append(p.dtype)
                self.flat_numel.append(0)
            k = dtypes.index(p.dtype)
            self.place.append((k, self.flat_numel[k], p.numel(), p.shape))
            self.flat_numel[k] += p.numel()
        self.first_of_flat = [next(i for i, pl in enumerate(self.place) if pl[0] == k)
                              for k in range(len(dtypes))]
        # The shards, as parameters the optimizer steps in place.
        self.flat_params: List[nn.Parameter] = []
        self.grad_views: List[torch.Tensor] = []
        for k in range(lib.dk_shard_num_flat(self.handle)):
            data, grad = ctypes.c_void_p(), ctypes.c_void_p()
            numel, dtype = ctypes.c_int64(), ctypes.c_int32()
            check(lib.dk_shard_local, self.handle, k, ctypes.byref(data), ctypes.byref(grad),
                  ctypes.byref(numel), ctypes.byref(dtype))
            torch_dtype = _TORCH_DTYPE[dtype.value]
            flat = nn.Parameter(tensor_at(data.value, numel.value, torch_dtype, self.shard_device))
            self.grad_views.append(tensor_at(grad.value, numel.value, torch_dtype,
                                             self.shard_device))
            flat.grad = self.grad_views[-1]
            self.flat_params.append(flat)
        # Full parameters: torch-owned, in the compute dtype, storage freed
        # while sharded; the module sees views of them. NO_SHARD in the
        # parameters' own dtype: the shard is the whole parameter, so the
        # module computes on the shard's memory itself (nothing gathered,
        # nothing copied).
        self.aliased = (config.strategy == _lib.SHARD_NO_SHARD and compute_dtype is None)
        if self.aliased:
            self.full = [flat.data[:n] for flat, n in zip(self.flat_params, self.flat_numel)]
        else:
            self.full = [torch.empty(n, dtype=compute_dtype or dtypes[k], device=self.device)
                         for k, n in enumerate(self.flat_numel)]
        self.views = [self.full[k].narrow(0, off, n).view(shape)
                      for k, off, n, shape in self.place]
        if not self.aliased:
            for t in self.full:
                _free(t)
        self.gathered = self.aliased
        self.gathering = False
        self.reduced = False
        self.leaves: List[Optional[torch.Tensor]] = [None] * len(owned)
        _live_units.add(self)
        if orig_params:
            # The original parameters stay registered (the optimizer's);
            # each becomes a 1-D view of its piece of this rank's shard.
            self.piece_data, self.piece_grad, self.piece_offset = [], [], []
            for i, (_, _, p) in enumerate(owned):
                offset, numel = ctypes.c_int64(), ctypes.c_int64()
                data, grad = ctypes.c_void_p(), ctypes.c_void_p()
                check(lib.dk_shard_piece, self.handle, i, ctypes.byref(offset),
                      ctypes.byref(numel), ctypes.byref(data), ctypes.byref(grad))
                self.piece_data.append(tensor_at(data.value or 0, numel.value, p.dtype,
                                                 self.shard_device))
                self.piece_grad.append(tensor_at(grad.value or 0, numel.value, p.dtype,
                                                 self.shard_device))
                self.piece_offset.append(offset.value)
                p.data = self.piece_data[-1]
                p.grad = None
        for (owner, name, _), view in zip(owned, self.views):
            if not orig_params:
                del owner._parameters[name]
            # An instance attribute: found before nn.Module.__getattr__ looks
            # in _parameters, so forward uses the full view.
            object.__setattr__(owner, name, view)

    def __del__(self):
        if getattr(self, "handle", None):
            _full_bytes["now"] -= self.full_bytes()
            lib.dk_shard_destroy(self.handle)
            self.handle = None

    def full_bytes(self) -> int:
        if self.aliased:
            return 0  # the library's shard memory
        return sum(t.storage().size() * t.element_size() for t in self.full)

    def start_gather(self) -> None:
        """Starts the all-gather and returns (prefetch): the next unshard()
        only waits for it."""
        if self.gathered or self.gathering:
            return
        check(lib.dk_shard_unshard_start, self.handle)
        self.gathering = True

    def unshard(self) -> None:
        if self.gathered:
            return
        self.start_gather()
        check(lib.dk_shard_unshard_wait, self.handle)
        self.gathering = False
        before = self.full_bytes()
        for k, t in enumerate(self.full):
            _alloc(t)
            address = ctypes.c_void_p()
            check(lib.dk_shard_full_param, self.handle, self.first_of_flat[k], ctypes.byref(address))
            with torch.no_grad():
                _alias(t).copy_(tensor_at(address.value, t.numel(), t.dtype, self.device))
        check(lib.dk_shard_reshard, self.handle)  # the torch copy is what is used
        _full_bytes["now"] += self.full_bytes() - before
        _full_bytes["peak"] = max(_full_bytes["peak"], _full_bytes["now"])
        self.gathered = True
        _sample_memory()

    def reshard(self) -> None:
        if not self.gathered or self.aliased:
            return
        _full_bytes["now"] -= self.full_bytes()
        for t in self.full:
            _free(t)
        self.gathered = False

    def expose(self, on_all_grads: Callable[["_Unit"], None]) -> None:
        """Fresh leaves over the full parameters for this forward. Once every
        leaf of the unit has its gradient, `on_all_grads` reduces the unit at
        once (its full gradients are freed then, not at the end of
        backward)."""
        self.pending = 0
        self.reduced = False
        self.grads_attached = False
        self.accumulators = []
        for i, ((owner, name, original), view) in enumerate(zip(self.owned, self.views)):
            leaf = view.detach().requires_grad_(original.requires_grad)
            if original.requires_grad and torch.is_grad_enabled():
                # After torch has accumulated the gradient into leaf.grad.
                accumulator = leaf.expand_as(leaf).grad_fn.next_functions[0][0]
                accumulator.register_hook(
                    lambda *unused, i=i: self._after_grad(i, on_all_grads))
                self.accumulators.append(accumulator)  # kept alive for the hook
                self.pending += 1
            object.__setattr__(owner, name, leaf)
            self.leaves[i] = leaf

    def attach_grads(self) -> None:
        """When backward reaches the unit: each leaf's .grad becomes a view of
        the unit's full gradient buffer in the library, so torch accumulates
        the gradient there in place (no copy)."""
        if self.grads_attached:
            return
        self.grads_attached = True
        self.grad_ptrs = {}
        for i, leaf in enumerate(self.leaves):
            if leaf is None or not leaf.requires_grad or leaf.grad is not None:
                continue
            address = ctypes.c_void_p()
            check(lib.dk_shard_full_grad, self.handle, i, ctypes.byref(address))
            leaf.grad = tensor_at(address.value, leaf.numel(), leaf.dtype,
                                  self.device).view(leaf.shape)
            self.grad_ptrs[i] = address.value
        _sample_memory()

    def _after_grad(self, index: int, on_all_grads) -> None:
        leaf = self.leaves[index]
        grad = leaf.grad
        if grad is not None and grad.data_ptr() != getattr(self, "grad_ptrs", {}).get(index):
            # A gradient that arrived before backward reached the unit (a
            # parameter used by another unit's forward): copied in.
            view = Borrowed(grad.contiguous())
            check(lib.dk_shard_accumulate_grad, self.handle, index, view.pointer)
        leaf.grad = None
        self.pending -= 1
        if self.pending == 0 and not self.reduced:
            on_all_grads(self)

    def start_reduce(self, require_sync: bool, free_after: bool) -> None:
        """Starts averaging the unit's gradients into its shard (the library
        runs it while backward goes on); finish_reduce waits for it."""
        if self.orig_params:
            self._take_back_grads()
        for flat, grad in zip(self.flat_params, self.grad_views):
            if not self.orig_params and flat.grad is None:
                # zero_grad(set_to_none=True): start from zero
                lib.dk_shard_zero_grads(self.handle)
                break
        for leaf in self.leaves:  # views of buffers the reduction takes
            if leaf is not None:
                leaf.grad = None
        lib.dk_shard_set_require_sync(self.handle, 1 if require_sync else 0)
        check(lib.dk_shard_reduce_grads_start, self.handle)
        self.reduced = True
        self.grads_attached = False
        if free_after:
            self.reshard()
        elif not self.aliased:
            self.gathered = False  # the optimizer changes the shards: gather again
        _sample_memory()

    def finish_reduce(self) -> None:
        check(lib.dk_shard_reduce_grads_wait, self.handle)
        for flat, grad in zip(self.flat_params, self.grad_views):
            flat.grad = grad
        if self.orig_params:
            for (_, _, p), grad in zip(self.owned, self.piece_grad):
                p.grad = grad
        _sample_memory()

    def _take_back_grads(self) -> None:
        """use_orig_params: the optimizer's view of each gradient (zeroed,
        set to None or replaced since the last step) back into the shard
        gradient the reduction adds to."""
        with torch.no_grad():
            for (_, name, p), mine in zip(self.owned, self.piece_grad):
                if p.grad is None:
                    mine.zero_()
                elif p.grad.numel() and p.grad.data_ptr() != mine.data_ptr():
                    if p.grad.numel() != mine.numel():
                        raise RuntimeError(f"FSDP: the gradient of {name} has {p.grad.numel()} "
                                           f"elements; this rank's shard of it {mine.numel()}")
                    mine.copy_(p.grad.reshape(-1))

    def take_events(self) -> List[tuple]:
        """(kind, unix_ns) of what the library recorded since the last call."""
        out, events = [], (_lib.ShardEvent * 1024)()
        count = ctypes.c_size_t()
        while True:
            check(lib.dk_shard_take_events, self.handle, events, len(events), ctypes.byref(count))
            out.extend((_EVENT_KINDS[e.kind], e.unix_ns) for e in events[:count.value])
            if count.value < len(events):
                return out

    def gather_full(self) -> List[torch.Tensor]:
        outs = [torch.empty(shape, dtype=p.dtype)
                for (_, _, p), (_, _, _, shape) in zip(self.owned, self.place)]
        views = [Borrowed(o) for o in outs]
        pointers = _lib.tensor_array(views)
        check(lib.dk_shard_gather_full, self.handle, pointers, len(views), 0)
        return outs

    def load_full(self, values: List[torch.Tensor]) -> None:
        views = [Borrowed(v.detach().contiguous()) for v in values]
        pointers = _lib.tensor_array(views)
        check(lib.dk_shard_load_full, self.handle, pointers, len(views), 0)
        self.reshard()


def _shard_config(strategy: ShardingStrategy, param_dtype, reduce_dtype, offload: bool,
                  sync_module_states: bool, replicate_group) -> "_lib.ShardConfig":
    config = _lib.ShardConfig()
    lib.dk_shard_config_init(ctypes.byref(config))
    config.strategy = strategy.value
    config.param_dtype = _DK_DTYPE[param_dtype] if param_dtype else _lib.DTYPE_UNSET
    config.reduce_dtype = _DK_DTYPE[reduce_dtype] if reduce_dtype else _lib.DTYPE_UNSET
    config.offload_params = 1 if offload else 0
    config.sync_module_states = 1 if sync_module_states else 0
    config.replicate_group = dist.groups.handle_of(replicate_group)
    return config


class _Coordinator:
    """The units of one sharded model: the forward / backward hooks that
    gather and free each unit, and one reduction of every unit at the end of
    backward (in one order on every rank, also for a unit this rank's
    backward did not reach: its gradient counts as zero)."""

    def __init__(self, free_after_backward: bool, forward_prefetch: bool = False,
                 backward_prefetch: Optional["BackwardPrefetch"] = None):
        self.units: List[_Unit] = []
        self.forward_prefetch = forward_prefetch
        self.backward_prefetch = backward_prefetch
        self.order: List[_Unit] = []     # the last forward's unit order
        self.recording: List[_Unit] = []
        self.flat_ids: Set[int] = set()  # the shard parameters: never sharded again
        self.require_sync = True
        self.backward_queued = False
        self.in_flight: Optional[_Unit] = None  # the unit being reduced
        self.free_after_backward = free_after_backward
        # The units' compute, for take_timeline: (unit, kind, unix_ns), the
        # newest 4096 marks kept.
        self.compute = collections.deque(maxlen=4096)

    def add(self, unit_module: nn.Module, owned: List[tuple], group, config, compute_dtype,
            reshard_after_forward: bool, is_root: bool, orig_params: bool = False) -> "_Unit":
        unit = _Unit(unit_module, owned, group, config, compute_dtype, reshard_after_forward,
                     is_root, orig_params)
        unit.index = len(self.units)
        self.units.append(unit)
        self.flat_ids.update(id(p) for p in unit.flat_params)
        unit_module.register_forward_pre_hook(lambda m, inputs, unit=unit: self._pre_forward(unit))
        unit_module.register_forward_hook(
            lambda m, inputs, output, unit=unit: self._post_forward(unit, output))
        return unit

    def _mark(self, unit: "_Unit", kind: str) -> None:
        self.compute.append((unit.index, kind, time.time_ns()))

    def _pre_forward(self, unit: "_Unit") -> None:
        unit.unshard()
        if unit not in self.recording:
            self.recording.append(unit)
        if self.forward_prefetch:  # the unit the last forward ran next
            following = self._neighbour(unit, +1)
            if following is not None:
                following.start_gather()
        unit.expose(self._gradients_complete)
        self._mark(unit, "forward_start")

    def _neighbour(self, unit: "_Unit", step: int) -> Optional["_Unit"]:
        """The unit `step` places after `unit` in the last forward's order."""
        if unit not in self.order:
            return None
        i = self.order.index(unit) + step
        return self.order[i] if 0 <= i < len(self.order) else None

    def _gradients_complete(self, unit: "_Unit") -> None:
        """Backward computed every gradient of `unit`."""
        self._mark(unit, "backward_end")
        if self.backward_prefetch == BackwardPrefetch.BACKWARD_POST:
            # torch's BACKWARD_POST: the next unit's gather is issued after
            # this unit's gradients, before its reduction.
            previous = self._neighbour(unit, -1)
            if previous is not None and not previous.reduced:
                previous.start_gather()
        self._reduce_now(unit)

    def _reduce_now(self, unit: "_Unit") -> None:
        """Every gradient of `unit` arrived: start reducing it, overlapping
        the rest of backward (each rank's backward reaches the units in the
        same order). One reduction is in flight at a time, so only one
        unit's full gradients wait in the library."""
        self._finish_in_flight()
        unit.start_reduce(self.require_sync, self.free_after_backward)
        self.in_flight = unit

    def _finish_in_flight(self) -> None:
        if self.in_flight is not None:
            unit, self.in_flight = self.in_flight, None
            unit.finish_reduce()

    def _post_forward(self, unit: "_Unit", output):
        self._mark(unit, "forward_end")
        if unit.reshard_after_forward:
            unit.reshard()
        if torch.is_grad_enabled():
            for t in _tensors_in(output):
                if t.requires_grad:
                    t.register_hook(lambda grad, unit=unit: self._pre_backward(unit))
        return output

    def _pre_backward(self, unit: "_Unit") -> None:
        if not self.backward_queued:  # the forward that led here set the order
            self.order, self.recording = self.recording, []
        unit.unshard()
        # The previous unit's reduction overlapped the gather above; finish
        # it before this unit's full gradients are allocated, so the
        # library never holds two units' full gradients.
        self._finish_in_flight()
        unit.attach_grads()
        if self.backward_prefetch == BackwardPrefetch.BACKWARD_PRE:
            # Backward reaches the units in reverse forward order: gather the
            # next one while this one computes its gradients.
            previous = self._neighbour(unit, -1)
            if previous is not None:
                previous.start_gather()
        if not self.backward_queued:
            self.backward_queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self._finish_backward)
        self._mark(unit, "backward_start")

    def _finish_backward(self) -> None:
        # Units backward did not reach here: reduced now, in one order on
        # every rank (their gradient counts as zero).
        for unit in reversed(self.units):
            if not getattr(unit, "reduced", False):
                self._reduce_now(unit)
        self._finish_in_flight()
        for unit in reversed(self.units):
            unit.reduced = False
            if unit.gathering:  # prefetched but not used: it holds old values
                check(lib.dk_shard_unshard_wait, unit.handle)
                check(lib.dk_shard_reshard, unit.handle)
                unit.gathering = False
        self.backward_queued = False

    @contextlib.contextmanager
    def no_sync(self):
        previous = self.require_sync
        self.require_sync = False
        try:
            yield
        finally:
            self.require_sync = previous


def _unclaimed_params(module: nn.Module, ignored: Set[nn.Module], claimed: Set[int]) -> List[tuple]:
    """(owner, name, parameter) under `module` that no unit holds yet."""
    owned = []
    for sub in module.modules():
        if sub in ignored:
            continue
        for name, p in list(sub._parameters.items()):
            if p is None or id(p) in claimed:
                continue
            claimed.add(id(p))
            owned.append((sub, name, p))
    return owned


class FullyShardedDataParallel(nn.Module):
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
        strategy = sharding_strategy or ShardingStrategy.FULL_SHARD
        if not isinstance(strategy, ShardingStrategy):
            raise TypeError(f"sharding_strategy must be a ShardingStrategy, got {strategy!r}")
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
        if sync_module_states and dist.get_world_size(process_group) > 1:
            for b in module.buffers():
                dist.broadcast(b, dist.get_global_rank(process_group, 0), process_group)
        param_dtype = mixed_precision.param_dtype if mixed_precision else None
        config = _shard_config(strategy, param_dtype,
                               mixed_precision.reduce_dtype if mixed_precision else None,
                               cpu_offload is not None and cpu_offload.offload_params,
                               sync_module_states, replicate_group)
        # Keys of the full state dict, in the original order.
        self._keys = list(module.state_dict().keys())
        param_key = {id(p): name for name, p in module.named_parameters()}
        reshard = strategy in (ShardingStrategy.FULL_SHARD, ShardingStrategy.HYBRID_SHARD)
        claimed: Set[int] = {id(p) for p in ignored_parameters or []}  # left alone
        self._coordinator = _Coordinator(strategy != ShardingStrategy.NO_SHARD,
                                         forward_prefetch, backward_prefetch)
        for unit_module in _units_of(module, auto_wrap_policy, ignored):
            owned = _unclaimed_params(unit_module, ignored, claimed)
            if not owned:
                continue
            unit = self._coordinator.add(unit_module, owned, process_group, config, param_dtype,
                                         reshard and unit_module is not module,
                                         unit_module is module, use_orig_params)
            unit.keys = [param_key[id(p)] for _, _, p in owned]
        self._units = self._coordinator.units
        self._group = process_group
        self.use_orig_params = use_orig_params
        # MixedPrecision.buffer_dtype: floating buffers live (and forward
        # uses them) in it; state dicts give them in their own dtype, as
        # torch's full state dict does.
        self._buffer_dtypes = {}
        if mixed_precision is not None and mixed_precision.buffer_dtype is not None:
            for name, b in module.named_buffers():
                if b.is_floating_point():
                    self._buffer_dtypes[name] = b.dtype
                    b.data = b.data.to(mixed_precision.buffer_dtype)
        # What the optimizer steps: the flat shards, or (use_orig_params) the
        # original parameters, still registered in the module.
        self._flat = nn.ParameterList([] if use_orig_params else
                                      [p for u in self._units for p in u.flat_params])

    def forward(self, *args, **kwargs):
        if self._units and self._units[0].device.type == "cuda":
            # torch's FSDP: inputs follow the parameters to their device.
            device = self._units[0].device
            args, kwargs = move_to(args, device), move_to(kwargs, device)
        if self.mixed_precision is not None and self.mixed_precision.param_dtype is not None:
            args, kwargs = _cast_inputs(self.mixed_precision.param_dtype, args, kwargs)
        return self.module(*args, **kwargs)

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

    # ---- state dicts --------------------------------------------------------------

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
                check(lib.dk_shard_load_sharded, unit.handle, world, pointers, len(views))
                unit.reshard()
        self._load_buffers(state_dicts[0])
        return None

    # ---- optimizer state dicts (torch's FSDP.optim_state_dict and friends) -------

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

    @staticmethod
    def _is_sharded_state(value, local: torch.Tensor) -> bool:
        return isinstance(value, torch.Tensor) and value.dim() == 1 and \
            value.numel() == local.numel() and local.dim() == 1

    def _full_states(self, unit: "_Unit", index: int, state: dict) -> List[tuple]:
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
    def optim_state_dict(model: "FullyShardedDataParallel", optim: torch.optim.Optimizer) -> dict:
        """torch's FSDP.optim_state_dict: the optimizer's state with every
        per-element state (momentum, Adam's moments) gathered to the full
        shape, keyed by the original parameter names, so a job of any size
        loads it (optim_state_dict_to_load). Collective."""
        places = model._places()
        state, groups = {}, []
        for group in optim.param_groups:
            names = []
            for p in group["params"]:
                if id(p) not in places:
                    raise ValueError("optim_state_dict: the optimizer steps a tensor that is not "
                                     "one of this model's parameters()")
                unit, index = places[id(p)]
                for key, full in model._full_states(unit, index, optim.state.get(p, {})):
                    names.append(key)
                    if full:
                        state[key] = full
            groups.append({**{k: v for k, v in group.items() if k != "params"},
                           "params": names})
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

    def _local_state(self, unit: "_Unit", index: int, fulls: List[Optional[dict]]) -> dict:
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

    def _load_buffers(self, state_dict) -> None:
        buffers = dict(self.module.named_buffers())
        for key, value in state_dict.items():
            if key in buffers:
                buffers[key].copy_(value)


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


def _cast_inputs(dtype: torch.dtype, args, kwargs):
    cast = lambda x: x.to(dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x
    return tuple(cast(a) for a in args), {k: cast(v) for k, v in kwargs.items()}


# ---- FSDP2's composable form ----------------------------------------------------------


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
    on the root last. Collective."""
    found = []
    for sub in module.modules():
        c = getattr(sub, "_dk_fsdp", None)
        if c is not None and all(c is not f for f in found):
            found.append(c)
    coordinator = found[0] if found else _Coordinator(free_after_backward=True)
    claimed = {id(p) for p in ignored_params or []}
    for c in found:  # what the submodules' calls took, and their shards
        claimed.update(c.flat_ids)
        for unit in c.units:
            claimed.update(id(p) for _, _, p in unit.owned)
    owned = _unclaimed_params(module, set(), claimed)
    param_dtype = mp_policy.param_dtype if mp_policy else None
    config = _shard_config(ShardingStrategy.FULL_SHARD if reshard_after_forward
                           else ShardingStrategy.SHARD_GRAD_OP, param_dtype,
                           mp_policy.reduce_dtype if mp_policy else None,
                           offload_policy is not None, False, None)
    if owned:
        unit = coordinator.add(module, owned, mesh, config, param_dtype, reshard_after_forward,
                               False)
        for k, flat in enumerate(unit.flat_params):
            module.register_parameter(f"_dk_flat_param_{len(coordinator.units) - 1}_{k}", flat)
    module._dk_fsdp = coordinator
    if mp_policy is not None and mp_policy.param_dtype is not None and mp_policy.cast_forward_inputs:
        module.register_forward_pre_hook(
            lambda m, args: _cast_inputs(mp_policy.param_dtype, args, {})[0])
    if not isinstance(module, FSDPModule):
        module.__class__ = type(f"FSDP{type(module).__name__}", (FSDPModule, type(module)), {})
    return module


def _tensors_in(x) -> List[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, dict):
        return [t for v in x.values() for t in _tensors_in(v)]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _tensors_in(v)]
    return []
