"""One sharded unit at run time: its dk_shard_t, the shard parameters the
optimizer steps, and the torch storage its full parameters and gradients
live in while gathered (gather, free, expose to autograd, reduce)."""
import ctypes
from typing import Callable, List, Optional, Sequence

import torch
from torch import nn

from .. import _lib, dist
from .._dlpack import Borrowed
from .._lib import lib, raise_for_status
from .._memory import tensor_at
from . import memory
from .options import TORCH_DTYPE
from .timeline import EVENT_KINDS


# While a unit is sharded its full parameters' storage is freed; the tensors
# (and the module's views of them) stay, to be filled again by the next gather.
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


def flat_param_name(k: int) -> str:
    """The name a unit's flat shard k has on the unit's module (torch's
    "_flat_param" for the first; one more per further parameter dtype)."""
    return "_flat_param" if k == 0 else f"_flat_param_{k}"


class Unit:
    """One sharded unit: its parameters' places in the module tree, the
    dk_shard_t, the shard parameters the optimizer sees, and the torch-owned
    storage the full parameters live in while gathered."""

    def __init__(self, module: nn.Module, owned: List[tuple], group, config, compute_dtype,
                 reshard_after_forward: bool, is_root: bool, orig_params: bool = False,
                 aliases: Sequence[tuple] = (), names: Optional[Sequence[str]] = None):
        self._made_with = (config, compute_dtype, reshard_after_forward, is_root)
        # What the library's errors call each parameter: its path in the
        # wrapped module where the caller gives it (as C++ names them), else
        # its owner's type and attribute name.
        self.param_names = (list(names) if names is not None else
                            [f"{type(m).__name__}.{n}" for m, n, _ in owned])
        self.module = module
        self.orig_params = orig_params
        # The group the unit shards over and this rank's place in it.
        self.group = group
        sharded = config.strategy != _lib.SHARD_NO_SHARD and dist.is_distributed()
        self.shard_count = dist.get_world_size(group) if sharded else 1
        self.shard_rank = dist.get_rank(group) if sharded else 0
        self.owned = owned  # (owner module, attribute name, original Parameter)
        # (owner, name, i): where owned[i]'s Parameter is registered too (tied
        # weights). Held once (one place in the flat, one gradient); each
        # place gets the same view and leaf.
        self.aliases = list(aliases)
        self.is_root = is_root
        self.reshard_after_forward = reshard_after_forward
        params = [p for _, _, p in owned]
        # The library keeps full parameters and gradients on the parameters'
        # device, the shard there too unless it is offloaded to the host.
        self.device = params[0].device if params else torch.device("cpu")
        self.shard_device = torch.device("cpu") if config.offload_params else self.device
        views = [Borrowed(p.detach().contiguous()) for p in params]
        pointers = _lib.tensor_array(views)
        names = (ctypes.c_char_p * len(owned))(*[n.encode() for n in self.param_names])
        # Frozen parameters (requires_grad False) go into flat shards of
        # their own, which take no gradient: the optimizer's weight decay
        # would move them in a flat shard beside trainable ones.
        self.frozen = [not p.requires_grad for p in params]
        flags = (ctypes.c_int32 * max(1, len(params)))(*[int(f) for f in self.frozen])
        config = type(config).from_buffer_copy(config)
        config.frozen = ctypes.cast(flags, ctypes.POINTER(ctypes.c_int32))
        self.handle = ctypes.c_void_p()
        raise_for_status(lib.dk_shard_create, dist.groups.handle_of(group), pointers, len(views),
                         names, ctypes.byref(config), ctypes.byref(self.handle))
        # Where each parameter lies: flats by (dtype, frozen) in first-use
        # order, as the library places them.
        kinds: List[tuple] = []
        self.place = []
        self.flat_numel: List[int] = []
        for p, frozen in zip(params, self.frozen):
            if (p.dtype, frozen) not in kinds:
                kinds.append((p.dtype, frozen))
                self.flat_numel.append(0)
            k = kinds.index((p.dtype, frozen))
            self.place.append((k, self.flat_numel[k], p.numel(), p.shape))
            self.flat_numel[k] += p.numel()
        dtypes = [dtype for dtype, _ in kinds]
        self.flat_frozen = [frozen for _, frozen in kinds]
        self.first_of_flat = [next(i for i, pl in enumerate(self.place) if pl[0] == k)
                              for k in range(len(dtypes))]
        # The shards, as parameters the optimizer steps in place.
        self.flat_params: List[nn.Parameter] = []
        self.grad_views: List[Optional[torch.Tensor]] = []  # None: frozen
        if lib.dk_shard_num_flat(self.handle) != len(kinds):
            raise AssertionError("FSDP: the library placed the parameters otherwise")
        for k in range(len(kinds)):
            data, grad = ctypes.c_void_p(), ctypes.c_void_p()
            numel, dtype = ctypes.c_int64(), ctypes.c_int32()
            raise_for_status(lib.dk_shard_local, self.handle, k, ctypes.byref(data),
                             ctypes.byref(grad), ctypes.byref(numel), ctypes.byref(dtype))
            torch_dtype = TORCH_DTYPE[dtype.value]
            flat = nn.Parameter(tensor_at(data.value, numel.value, torch_dtype, self.shard_device),
                                requires_grad=not self.flat_frozen[k])
            self.grad_views.append(None if self.flat_frozen[k] else
                                   tensor_at(grad.value, numel.value, torch_dtype,
                                             self.shard_device))
            flat.grad = self.grad_views[-1]
            self.flat_params.append(flat)
        # Full parameters: torch-owned, in the compute dtype, storage freed
        # while sharded; the module sees views of them. NO_SHARD in the
        # parameters' own dtype: the shard is the whole parameter, so the
        # module computes on the shard's memory itself (nothing gathered,
        # nothing copied). Not where the shard is offloaded to another
        # device than the compute's (CUDA with CPUOffload(offload_params)):
        # the module would compute on host memory; the full parameters are
        # then gathered (copied) to the device as under the other strategies.
        self.aliased = (config.strategy == _lib.SHARD_NO_SHARD and compute_dtype is None
                        and self.shard_device == self.device)
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
        self.pending = 0
        # A unit whose leaves may take gradients in more than one backward
        # pass (reentrant checkpoint: its inner ones and the outer one) is
        # reduced at the end of backward, not when `pending` reaches 0:
        # `defer` (this backward; the Coordinator sets it), `fired` (hook
        # calls per parameter this backward) and `forward_calls` (this
        # forward's runs of the unit's module).
        self.defer = False
        self.fired = [0] * len(owned)
        self.forward_calls = 0
        self.exposed_in_backward = False
        # Forwards now running with the full parameters (the unit's module
        # and modules holding aliases of them, nested): reshard after the
        # outermost. in_backward: backward reached the unit, not yet reduced.
        self.users = 0
        self.in_backward = False
        self.leaves: List[Optional[torch.Tensor]] = [None] * len(owned)
        memory.track_unit(self)
        if orig_params:
            # The original parameters stay registered (the optimizer's);
            # each becomes a 1-D view of its piece of this rank's shard.
            self.piece_data, self.piece_grad, self.piece_offset = [], [], []
            for i, (_, _, p) in enumerate(owned):
                offset, numel = ctypes.c_int64(), ctypes.c_int64()
                data, grad = ctypes.c_void_p(), ctypes.c_void_p()
                raise_for_status(lib.dk_shard_piece, self.handle, i, ctypes.byref(offset),
                                 ctypes.byref(numel), ctypes.byref(data), ctypes.byref(grad))
                self.piece_data.append(tensor_at(data.value or 0, numel.value, p.dtype,
                                                 self.shard_device))
                # A frozen parameter's piece has no gradient.
                self.piece_grad.append(None if self.frozen[i] else
                                       tensor_at(grad.value or 0, numel.value, p.dtype,
                                                 self.shard_device))
                self.piece_offset.append(offset.value)
                p.data = self.piece_data[-1]
                p.grad = None
        for owner, name, view in self._places(self.views):
            if not orig_params:
                del owner._parameters[name]
            # An instance attribute: found before nn.Module.__getattr__ looks
            # in _parameters, so forward uses the full view.
            object.__setattr__(owner, name, view)
        if not orig_params:
            # As torch's FSDP registers its flat parameter on the module it
            # wraps: module.parameters() (what mmengine's optimizer builder
            # steps) and module.state_dict() hold the shards.
            for k, flat in enumerate(self.flat_params):
                module.register_parameter(flat_param_name(k), flat)

    def _places(self, tensors: Sequence[torch.Tensor]) -> List[tuple]:
        """(owner, name, tensor) for every place a parameter of the unit is
        registered, tensors[i] for owned[i] (at its aliases too)."""
        return ([(owner, name, t) for (owner, name, _), t in zip(self.owned, tensors)] +
                [(owner, name, tensors[i]) for owner, name, i in self.aliases])

    def regroup(self, group) -> None:
        """Collective over `group`: the unit shards over it instead (after a
        shrink or a grow; distkit.elastic). A new dk_shard there; the flat
        shard Parameters stay the same objects (the optimizer keeps them),
        now over this rank's piece of the new layout. Their values are
        undefined until loaded (load_sharded_state_dicts). Under
        use_orig_params the original Parameters stay the optimizer's too:
        each becomes a view of its piece of the new layout (another length;
        distkit.elastic loads the optimizer's state re-sharded to it)."""
        self.reshard()
        self.__del__()  # the old dk_shard (its group is gone)
        flats = self.flat_params
        # As before wrapping: the original parameters registered again, the
        # flat shards not; __init__ then wraps the module anew.
        for owner, name, original in self._places([p for _, _, p in self.owned]):
            owner.__dict__.pop(name, None)
            owner._parameters[name] = original
        for original, (_, _, _, shape) in zip([p for _, _, p in self.owned], self.place):
            if self.orig_params:
                # A view of the old piece until now: its whole shape again
                # (values undefined) for the library to shard.
                original.data = torch.empty(shape, dtype=original.dtype, device=self.device)
                original.grad = None
        for k in range(len(flats)):
            self.module._parameters.pop(flat_param_name(k), None)
        config, compute_dtype, reshard_after_forward, is_root = self._made_with
        Unit.__init__(self, self.module, self.owned, group, config, compute_dtype,
                      reshard_after_forward, is_root, self.orig_params, self.aliases,
                      self.param_names)
        if self.orig_params:
            return  # the optimizer steps the original Parameters, now new pieces
        if len(self.flat_params) != len(flats):
            raise AssertionError("regroup: the unit's flat shards changed in number")
        for k, (old, new) in enumerate(zip(flats, self.flat_params)):
            old.data = new.data
            old.grad = self.grad_views[k]
            self.flat_params[k] = old
            self.module._parameters[flat_param_name(k)] = old

    def __del__(self):
        if getattr(self, "handle", None):
            memory.add_full_bytes(-self.full_bytes())
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
        raise_for_status(lib.dk_shard_unshard_start, self.handle)
        self.gathering = True

    def unshard(self) -> None:
        if self.gathered:
            return
        self.start_gather()
        raise_for_status(lib.dk_shard_unshard_wait, self.handle)
        self.gathering = False
        before = self.full_bytes()
        for k, t in enumerate(self.full):
            _alloc(t)
            address = ctypes.c_void_p()
            raise_for_status(lib.dk_shard_full_param, self.handle, self.first_of_flat[k],
                             ctypes.byref(address))
            with torch.no_grad():
                _alias(t).copy_(tensor_at(address.value, t.numel(), t.dtype, self.device))
        raise_for_status(lib.dk_shard_reshard, self.handle)  # the torch copy is what is used
        memory.add_full_bytes(self.full_bytes() - before)
        self.gathered = True
        memory.sample_held()

    def reshard(self) -> None:
        if not self.gathered or self.aliased:
            return
        memory.add_full_bytes(-self.full_bytes())
        for t in self.full:
            _free(t)
        self.gathered = False

    def expose(self, on_all_grads: Callable[["Unit"], None]) -> None:
        """Fresh leaves over the full parameters for this forward. Once every
        leaf of the unit has its gradient, `on_all_grads` reduces the unit at
        once (its full gradients are freed then, not at the end of
        backward).

        A unit run again before backward (a module called twice in one
        forward) keeps the leaves whose gradients are still awaited: each
        parameter then has one leaf, autograd sums the gradients of all its
        uses into it and its hook fires once, with the sum."""
        if not (self.pending > 0 and not self.reduced):
            self.pending = 0
            self.reduced = False
            self.grads_attached = False
            self.accumulators = []
            for i, ((_, _, original), view) in enumerate(zip(self.owned, self.views)):
                if original.requires_grad and self.frozen[i]:
                    raise RuntimeError(
                        f"FSDP: {self.param_names[i]} was frozen (requires_grad=False) when "
                        "the model was wrapped, so its flat shard takes no gradient; set "
                        "requires_grad before wrapping (as torch's FSDP, it cannot change "
                        "after)")
                leaf = view.detach().requires_grad_(original.requires_grad)
                if original.requires_grad and torch.is_grad_enabled():
                    # After torch has accumulated the gradient into leaf.grad.
                    accumulator = leaf.expand_as(leaf).grad_fn.next_functions[0][0]
                    accumulator.register_hook(
                        lambda *unused, i=i: self._after_grad(i, on_all_grads))
                    self.accumulators.append(accumulator)  # kept alive for the hook
                    self.pending += 1
                self.leaves[i] = leaf
        for owner, name, leaf in self._places(self.leaves):
            object.__setattr__(owner, name, leaf)

    def attach_grads(self) -> None:
        """When backward reaches the unit: each leaf's .grad becomes a view of
        the unit's full gradient buffer in the library, so torch accumulates
        the gradient there in place (no copy)."""
        if self.grads_attached:
            return
        self.grads_attached = True
        self.grad_ptrs = {}
        self.grad_buffers = {}
        for i, leaf in enumerate(self.leaves):
            if leaf is None or not leaf.requires_grad or leaf.grad is not None:
                continue
            address = ctypes.c_void_p()
            raise_for_status(lib.dk_shard_full_grad, self.handle, i, ctypes.byref(address))
            leaf.grad = tensor_at(address.value, leaf.numel(), leaf.dtype,
                                  self.device).view(leaf.shape)
            self.grad_ptrs[i] = address.value
            self.grad_buffers[i] = leaf.grad
        memory.sample_held()

    def _after_grad(self, index: int, on_all_grads) -> None:
        leaf = self.leaves[index]
        grad = leaf.grad
        # The buffer view attach_grads gave leaf.grad, where it still had it
        # (leaf.grad is None after this: a further gradient of the leaf, in
        # this or another backward pass, comes as a tensor of its own).
        buffer = getattr(self, "grad_buffers", {}).pop(index, None)
        if grad is not None and buffer is not None and grad.data_ptr() != buffer.data_ptr():
            # torch replaced the buffer view with a new tensor holding the
            # buffer's gradient plus this one (backward(create_graph=True)
            # accumulates out of place): the sum, copied over the buffer
            # (added, the gradient accumulated under no_sync counted twice).
            with torch.no_grad():
                buffer.copy_(grad.detach().reshape(buffer.shape))
        elif grad is not None and buffer is None:
            # A gradient that arrived before backward reached the unit (a
            # parameter used by another unit's forward): added in.
            view = Borrowed(grad.contiguous())
            raise_for_status(lib.dk_shard_accumulate_grad, self.handle, index, view.pointer)
        leaf.grad = None
        self.pending -= 1
        self.fired[index] += 1
        if self.fired[index] > 1 or self.aliases:
            # A leaf's gradient came in more than one backward pass (or may:
            # a tied parameter): its count says nothing; the end of
            # backward reduces the unit.
            self.defer = True
        if self.pending == 0 and not self.reduced and not self.defer:
            on_all_grads(self)

    def start_reduce(self, require_sync: bool, free_after: bool) -> None:
        """Starts averaging the unit's gradients into its shard (the library
        runs it while backward goes on); finish_reduce waits for it."""
        if self.orig_params:
            self._take_back_grads()
        for flat, grad in zip(self.flat_params, self.grad_views):
            if not self.orig_params and grad is not None and flat.grad is None:
                # zero_grad(set_to_none=True): start from zero
                lib.dk_shard_zero_grads(self.handle)
                break
        for leaf in self.leaves:  # views of buffers the reduction takes
            if leaf is not None:
                leaf.grad = None
        lib.dk_shard_set_require_sync(self.handle, 1 if require_sync else 0)
        raise_for_status(lib.dk_shard_reduce_grads_start, self.handle)
        self.reduced = True
        self.in_backward = False
        self.grads_attached = False
        self.grad_ptrs, self.grad_buffers = {}, {}  # the buffers are the reduction's now
        if free_after:
            self.reshard()
        elif not self.aliased:
            self.gathered = False  # the optimizer changes the shards: gather again
        memory.sample_held()

    def finish_reduce(self) -> None:
        raise_for_status(lib.dk_shard_reduce_grads_wait, self.handle)
        for flat, grad in zip(self.flat_params, self.grad_views):
            flat.grad = grad
        if self.orig_params:
            for (_, _, p), grad in zip(self.owned, self.piece_grad):
                if grad is not None:
                    p.grad = grad
        memory.sample_held()

    def _take_back_grads(self) -> None:
        """use_orig_params: the optimizer's view of each gradient (zeroed,
        set to None or replaced since the last step) back into the shard
        gradient the reduction adds to."""
        with torch.no_grad():
            for (_, name, p), mine in zip(self.owned, self.piece_grad):
                if mine is None:
                    continue  # frozen
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
            raise_for_status(lib.dk_shard_take_events, self.handle, events, len(events),
                             ctypes.byref(count))
            out.extend((EVENT_KINDS[e.kind], e.unix_ns) for e in events[:count.value])
            if count.value < len(events):
                return out

    def gather_full(self) -> List[torch.Tensor]:
        outs = [torch.empty(shape, dtype=p.dtype)
                for (_, _, p), (_, _, _, shape) in zip(self.owned, self.place)]
        views = [Borrowed(o) for o in outs]
        pointers = _lib.tensor_array(views)
        raise_for_status(lib.dk_shard_gather_full, self.handle, pointers, len(views), 0)
        return outs

    def load_full(self, values: List[torch.Tensor], rank0_only: bool = False) -> None:
        """Each rank keeps its slice of `values`; rank0_only: rank 0's
        values (collective: broadcast over the unit's group)."""
        views = [Borrowed(v.detach().contiguous()) for v in values]
        pointers = _lib.tensor_array(views)
        raise_for_status(lib.dk_shard_load_full, self.handle, pointers, len(views),
                         1 if rank0_only and dist.is_distributed()
                         and dist.get_world_size(self.group) > 1 else 0)
        self.reshard()
