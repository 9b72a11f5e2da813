"""Data-parallel model wrappers with mmengine's interface
(``mmengine.model.MMDistributedDataParallel`` and friends).

The autograd hooks are Python; buckets, the asynchronous all_reduces and the
averaging run in C++ (distkit's GradReducer, through the ABI's dk_reducer_*),
so communication overlaps the rest of backward without holding the GIL. The
averaged gradients equal torch.nn.parallel.DistributedDataParallel's.

    from distkit import dist
    from distkit.model import MMDistributedDataParallel, OptimWrapper
    dist.init_dist("pytorch", backend="gloo")
    model = MMDistributedDataParallel(model)
    log_vars = model.train_step(data, OptimWrapper(torch.optim.SGD(...)))
"""
import contextlib
import ctypes
import hashlib
import threading
import weakref
from typing import Dict, List, Optional

import torch

from . import _lib, dist
from ._dlpack import Borrowed
from ._lib import lib, raise_for_status
from ._memory import tensor_at
from ._model_steps import parse_losses, run_forward
from .dist.devices import move_to
from .fsdp import FullyShardedDataParallel
from .hooks import FSDPCheckpointHook  # registered in mmengine's HOOKS (scope "distkit")
from .model_fsdp import MMFullyShardedDataParallel
from .registry import DISTKIT_MODEL_WRAPPERS, MODEL_WRAPPERS

__all__ = [
    "FSDPCheckpointHook",
    "MMDistributedDataParallel",
    "MMFullyShardedDataParallel",
    "MMSeparateDistributedDataParallel",
    "MODEL_WRAPPERS",
    "OptimWrapper",
    "is_model_wrapper",
    "parse_losses",
]

_HOOKS = {None: 0, "fp16": 1, "fp16_compress": 1, "bf16": 2, "bf16_compress": 2}


def _memory_order(t: torch.Tensor) -> Optional[List[int]]:
    """The permutation that makes a dense tensor in another memory format
    (channels_last, a transposed weight) contiguous over the same memory;
    None when it is contiguous already, or when no permutation does (not
    dense: the library then refuses it)."""
    if t.is_contiguous():
        return None
    order = sorted(range(t.dim()), key=lambda d: (-t.stride(d), -t.size(d)))
    return order if t.permute(order).is_contiguous() else None


def _lendable(t: torch.Tensor) -> torch.Tensor:
    """`t` as the library takes it: contiguous, over the same memory (the
    reducer works on elements in memory order; every rank's parameters have
    the same layout, checked at construction)."""
    order = _memory_order(t)
    return t if order is None else t.permute(order)


def _tensor_at(address: int, like: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A tensor over library memory at `address` on `device` (the reducer's
    buckets live on the group's comm device), shaped, typed and laid out in
    memory like `like` (the elements in `like`'s memory order, as lent)."""
    flat = tensor_at(address, like.numel(), like.dtype, device)
    order = _memory_order(like)
    if order is None:
        return flat.view(like.shape)
    inverse = [order.index(d) for d in range(len(order))]
    return flat.view([like.shape[d] for d in order]).permute(inverse)


def _layout_digest(params) -> int:
    """The parameters' memory formats, as one integer the same on every rank
    whose parameters are laid out alike (hashlib: Python's hash is seeded)."""
    text = ";".join(",".join(map(str, _memory_order(p) or [])) for p in params)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:7], "little")


def _device_placement(module: torch.nn.Module, device_ids, output_device):
    """torch DDP's rules for device_ids / output_device: (device_ids,
    output_device) as device indices, or (None, None) for CPU modules and
    device_ids=None; a ValueError with torch's text otherwise."""
    devices = {p.device for p in module.parameters()}
    if len(devices) > 1:
        raise ValueError(
            "MMDistributedDataParallel: the module's parameters are on several devices "
            f"({sorted(str(d) for d in devices)}); a data-parallel replica must be on one device")
    on_cpu = not devices or next(iter(devices)).type == "cpu"
    if device_ids is not None and len(device_ids) > 0 and on_cpu:
        raise ValueError(
            "DistributedDataParallel device_ids and output_device arguments only work with "
            "single-device/multiple-device GPU modules or CPU modules, but got device_ids "
            f"{device_ids}, output_device {output_device}, and module parameters "
            f"{ {d for d in devices} }.")
    if device_ids is None or len(device_ids) == 0 or on_cpu:
        return None, None
    if len(device_ids) != 1:
        raise ValueError("device_ids can only be None or contain a single element.")
    ids = [torch._utils._get_device_index(d, True) for d in device_ids]
    module_device = next(iter(devices))
    if module_device.index != ids[0]:
        raise ValueError(f"MMDistributedDataParallel: device_ids {device_ids} names cuda:{ids[0]}, "
                         f"but the module is on {module_device}")
    out = ids[0] if output_device is None else torch._utils._get_device_index(output_device, True)
    return ids, out


def _reachable_leaves(outputs) -> set:
    """The AccumulateGrad nodes the autograd graph of `outputs` reaches."""
    stack, seen = [], set()

    def add(x):
        if isinstance(x, torch.Tensor):
            if x.grad_fn is not None:
                stack.append(x.grad_fn)
        elif isinstance(x, dict):
            for v in x.values():
                add(v)
        elif isinstance(x, (list, tuple)):
            for v in x:
                add(v)

    add(outputs)
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        for nxt, _ in node.next_functions:
            if nxt is not None:
                stack.append(nxt)
    return seen


class OptimWrapper:
    """The part of mmengine's OptimWrapper that train_step uses:
    ``update_params`` (backward, step, zero_grad, with gradient accumulation
    over ``accumulative_counts`` iterations) and ``optim_context`` (no_sync on
    the iterations that only accumulate)."""

    def __init__(self, optimizer: torch.optim.Optimizer, accumulative_counts: int = 1):
        if accumulative_counts < 1:
            raise ValueError(f"accumulative_counts must be >= 1, got {accumulative_counts}")
        self.optimizer = optimizer
        self._accumulative_counts = accumulative_counts
        self._inner_count = 0

    def should_update(self) -> bool:
        return (self._inner_count + 1) % self._accumulative_counts == 0

    def should_sync(self) -> bool:
        return self.should_update()

    @contextlib.contextmanager
    def optim_context(self, model):
        if not self.should_sync() and hasattr(model, "no_sync"):
            with model.no_sync():
                yield
        else:
            yield

    def backward(self, loss: torch.Tensor, **kwargs) -> None:
        loss.backward(**kwargs)
        self._inner_count += 1

    def step(self, **kwargs) -> None:
        self.optimizer.step(**kwargs)

    def zero_grad(self, **kwargs) -> None:
        self.optimizer.zero_grad(**kwargs)

    def update_params(self, loss: torch.Tensor) -> None:
        loss = loss / self._accumulative_counts
        update = self.should_update()
        self.backward(loss)
        if update:
            self.step()
            self.zero_grad()


class _FinalizeToken:
    """Held only by the _finalize callback queued on torch's engine, so it
    dies when the engine drops that callback: after running it, or without
    running it when the backward raised."""


class _Reducer:
    """The ABI's dk_reducer over a module's parameters and buffers."""

    def __init__(self, params, buffers, group, config):
        self.param_views = [Borrowed(_lendable(p.detach())) for p in params]
        self.buffer_views = [Borrowed(b) for b in buffers]
        ptrs = (_lib.T * max(1, len(params)))(*[v.pointer for v in self.param_views])
        bptrs = (_lib.T * max(1, len(buffers)))(*[v.pointer for v in self.buffer_views])
        self.handle = ctypes.c_void_p()
        with torch.no_grad():
            raise_for_status(lib.dk_reducer_create, dist.groups.handle_of(group), ptrs, len(params),
                             bptrs, len(buffers), ctypes.byref(config), ctypes.byref(self.handle))

    def __del__(self):
        handle = getattr(self, "handle", None)
        if handle:
            lib.dk_reducer_destroy(handle)
            self.handle = None


class MMDistributedDataParallel(torch.nn.Module):
    """mmengine's MMDistributedDataParallel on distkit: wraps `module`,
    broadcasts rank 0's parameters and buffers, and averages gradients during
    backward. ``train_step`` / ``val_step`` / ``test_step`` behave as
    mmengine's."""

    def __init__(self, module: torch.nn.Module, detect_anomalous_params: bool = False, *,
                 broadcast_buffers: bool = True, find_unused_parameters: bool = False,
                 bucket_cap_mb: float = 25, gradient_as_bucket_view: bool = False,
                 comm_hook: Optional[str] = None, process_group=None, device_ids=None,
                 output_device=None, **kwargs):
        super().__init__()
        if comm_hook not in _HOOKS:
            raise ValueError(f"comm_hook must be one of {sorted(k for k in _HOOKS if k)} or None, "
                             f"got {comm_hook!r}")
        self.device_ids, self.output_device = _device_placement(module, device_ids, output_device)
        self.module = module
        self.detect_anomalous_params = detect_anomalous_params
        self.broadcast_buffers = broadcast_buffers
        self.find_unused_parameters = find_unused_parameters
        self.gradient_as_bucket_view = gradient_as_bucket_view
        self.require_backward_grad_sync = True
        self.process_group = process_group
        seen = set()
        self._dk_params: List[torch.nn.Parameter] = []
        for p in module.parameters():
            if p.requires_grad and id(p) not in seen:  # shared parameters once
                seen.add(id(p))
                self._dk_params.append(p)
        self._dk_buffers = [b for b in module.buffers()]
        config = _lib.ReducerConfig()
        lib.dk_reducer_config_init(ctypes.byref(config))
        config.bucket_cap_mb = bucket_cap_mb
        config.find_unused_parameters = int(find_unused_parameters)
        config.gradient_as_bucket_view = int(gradient_as_bucket_view)
        config.broadcast_buffers = int(broadcast_buffers)
        config.comm_hook = _HOOKS[comm_hook]
        self._config = config
        self._check_layouts(process_group)
        self._attach(process_group)
        # Hooks on the gradient accumulators run once .grad holds the final
        # (accumulated) gradient; keep the accumulators alive.
        self._accumulators = []
        for i, p in enumerate(self._dk_params):
            acc = p.expand_as(p).grad_fn.next_functions[0][0]
            acc.register_hook(self._make_hook(i))
            self._accumulators.append(acc)

    # -- the reducer ---------------------------------------------------------------

    def _check_layouts(self, process_group) -> None:
        """Parameters in another memory format than contiguous (channels_last)
        are lent in memory order, so every rank must lay them out alike, as
        torch's DDP checks their strides: collective where this rank has
        such a parameter (a model all contiguous, the common case and what
        ranks in other languages register, costs nothing; a rank that does
        not take part then disagrees with one that does in the reducer's
        first collective, an error on both)."""
        if dist.get_world_size(process_group) <= 1:
            return
        if all(_memory_order(p) is None for p in self._dk_params):
            return
        digest = _layout_digest(self._dk_params)
        both = torch.tensor([digest, -digest], dtype=torch.int64)
        dist.all_reduce(both, op="max", group=process_group)
        if both[0].item() != digest or -both[1].item() != digest:
            raise ValueError(
                "MMDistributedDataParallel: the parameters' memory formats differ across ranks "
                "(channels_last on some ranks only?); wrap the same model in the same memory "
                "format on every rank")

    def _attach(self, process_group) -> None:
        # Collective over `process_group`: a reducer there (rank 0's
        # parameters and buffers broadcast), nothing borrowed yet.
        self._reducer = _Reducer(self._dk_params, self._dk_buffers, process_group, self._config)
        # Where the reducer's buckets live: the group's comm device (CUDA
        # gradients over Gloo are staged through host buckets).
        self._bucket_device = dist.get_comm_device(process_group)
        self._grad_views: List[Optional[Borrowed]] = [None] * len(self._dk_params)
        self._view_generation = -1
        self._finalize_queued = False
        self._finalize_token = None  # weakref to the queued callback's _FinalizeToken
        self._abandoned = False  # no forward nor mark since _abandon_iteration
        # Whether the backward of the last forward that built a graph reduces
        # (torch's DDP decides at forward: mmengine's gradient accumulation
        # runs the forward under no_sync and the backward after it).
        self._sync_backward = True
        # A synchronized forward whose backward has not finished: a later
        # forward under no_sync (an evaluation with grad enabled) does not
        # undo its decision (torch's DDP prepared the reducer then).
        self._synced_forward_pending = False
        # A forward's number: a dropped finalize of an older step (noticed
        # late, on an autograd device thread) must not abandon a newer one.
        self._step = 0
        self._state_lock = threading.RLock()
        self._used = None
        # find_unused_parameters: parameters whose gradient hook ran under
        # no_sync since the last synchronized backward. One the synchronized
        # backward does not reach still contributes what it accumulated (as
        # torch's DDP does), instead of a zero.
        self._accumulated = set()
        self._carried = []

    def regroup(self, process_group=None) -> None:
        """Collective over the new group: after a shrink or a grow
        (distkit.elastic does it), the wrapper reduces over
        ``process_group`` (default: the default group, as at construction)
        with a new reducer, as if it had been made there: rank 0's
        parameters and buffers are broadcast. The old reducer, and any
        gradient it held from a failed step, is dropped; the module, its
        parameters and the hooks stay the same objects."""
        if self.gradient_as_bucket_view:
            with torch.no_grad():  # the old buckets go: gradients own their memory again
                for p in self._dk_params:
                    if p.grad is not None:
                        p.grad = p.grad.clone()
        self._reducer = None  # destroyed before the new one borrows the parameters
        self.process_group = process_group
        self._attach(process_group)

    def _make_hook(self, index: int):
        def hook(*unused):
            self._mark_ready(index)
        return hook

    def _mark_ready(self, index: int) -> None:
        if not self._sync_backward:
            if self.find_unused_parameters:
                self._accumulated.add(index)
            return
        if self._abandoned:
            # Backward again after a failed one, with no forward through this
            # wrapper in between: the same graph, whose unused parameters the
            # last forward named.
            self._abandoned = False
            if self.find_unused_parameters and self._used is not None:
                self._prepare_unused()
        self._lend_grad(index)
        if not self._finalize_queued:
            self._finalize_queued = True
            token = _FinalizeToken()
            wrapper = weakref.ref(self)
            step = self._step

            def dropped(ref):
                # The engine let go of _finalize: a backward that raised,
                # unless _finalize ran (it clears the token). Not once a
                # newer forward began (it abandoned this step itself).
                me = wrapper()
                if me is None:
                    return
                with me._state_lock:
                    if me._finalize_token is ref and me._step == step:
                        me._abandon_iteration()

            self._finalize_token = weakref.ref(token, dropped)
            torch.autograd.Variable._execution_engine.queue_callback(
                lambda: self._finalize(token))

    def _abandon_iteration(self) -> None:
        """The last synchronized backward raised, so torch's engine dropped
        the queued _finalize: the reducer waits for the buckets it launched
        and forgets the gradients lent to it, so that the next backward does
        not find them "marked ready twice", and writes no gradient the caller
        zeroes or frees. Runs as the engine drops the callback: on the CPU
        before the exception reaches the caller; where a device thread lets
        go of it later, possibly after (then a gradient_as_bucket_view
        bucket still being averaged may be written while the caller zeroes
        it), and at the latest at the next forward. Every rank whose
        backward raised gets here; one whose backward succeeded waits in
        finalize, as with torch's DDP."""
        self._finalize_queued = False
        self._finalize_token = None
        self._synced_forward_pending = False
        self._abandoned = True
        try:
            raise_for_status(lib.dk_reducer_abandon, self._reducer.handle)
        finally:
            self._grad_views = [None] * len(self._dk_params)

    def _lend_grad(self, index: int) -> None:
        p = self._dk_params[index]
        if p.grad.stride() != p.stride() and _memory_order(p) != _memory_order(p.grad):
            # A gradient laid out otherwise than its parameter (the reducer
            # lends both in the parameter's memory order): a copy that is.
            with torch.no_grad():
                p.grad = torch.empty_like(p).copy_(p.grad)
        view = Borrowed(_lendable(p.grad))
        self._grad_views[index] = view  # borrowed by the library until finalize
        raise_for_status(lib.dk_reducer_mark_ready, self._reducer.handle, index, view.pointer)

    def _finalize(self, token: _FinalizeToken) -> None:
        # `token` lives as long as the engine holds this callback.
        self._finalize_queued = False
        self._synced_forward_pending = False
        self._finalize_token = None
        try:
            # Unreached in this backward, but accumulated under no_sync:
            # that gradient is this rank's contribution (forward left them
            # out of the unused ones).
            try:
                for i in self._carried:
                    self._lend_grad(i)
            except Exception:
                # As after a gradient hook's error: the rest go as zeros, so
                # the peers' buckets complete; then this rank raises.
                lib.dk_reducer_finalize(self._reducer.handle, None)
                raise
            finally:
                self._carried = []
            raise_for_status(lib.dk_reducer_finalize, self._reducer.handle)
            self._accumulated = set()
        finally:
            self._grad_views = [None] * len(self._dk_params)
        handle = self._reducer.handle
        with torch.no_grad():
            if self.find_unused_parameters:
                for i, p in enumerate(self._dk_params):
                    if not lib.dk_reducer_globally_used(handle, i) or (self._used is not None and i in self._used):
                        continue
                    # Unused here, used elsewhere: the averaged gradient.
                    address = ctypes.c_void_p()
                    raise_for_status(lib.dk_reducer_reduced_grad, handle, i, ctypes.byref(address))
                    reduced = _tensor_at(address.value, p, self._bucket_device).to(p.device)
                    if p.grad is None:
                        p.grad = reduced.clone()
                    else:
                        p.grad.copy_(reduced)
            if self.gradient_as_bucket_view and lib.dk_reducer_view_generation(handle) != self._view_generation:
                self._point_grads_at_views()

    def _point_grads_at_views(self) -> None:
        handle = self._reducer.handle
        self._view_generation = lib.dk_reducer_view_generation(handle)
        with torch.no_grad():
            for i, p in enumerate(self._dk_params):
                address = ctypes.c_void_p()
                raise_for_status(lib.dk_reducer_grad_view, handle, i, ctypes.byref(address))
                if p.grad is not None and p.grad.data_ptr() == address.value:
                    continue
                view = _tensor_at(address.value, p, self._bucket_device)
                if p.grad is not None:
                    view.copy_(p.grad)
                else:
                    view.zero_()
                p.grad = view

    # -- nn.Module ------------------------------------------------------------------

    def forward(self, *inputs, **kwargs):
        training = torch.is_grad_enabled() and self.require_backward_grad_sync
        if torch.is_grad_enabled():
            with self._state_lock:
                if self._finalize_queued:
                    # The last backward never finished and its callback was
                    # not seen dropped (it normally is): this step starts
                    # clean.
                    self._abandon_iteration()
                self._step += 1
                self._abandoned = False  # this forward prepares afresh
                self._sync_backward = training or self._synced_forward_pending
                self._synced_forward_pending = self._sync_backward
        if training and self.broadcast_buffers and self._dk_buffers:
            raise_for_status(lib.dk_reducer_broadcast_buffers, self._reducer.handle)
        if self.gradient_as_bucket_view:
            if self._view_generation < 0 or any(
                    p.grad is None for p in self._dk_params):
                self._point_grads_at_views()
        if self.device_ids:
            # torch DDP: inputs follow the module to device_ids[0].
            device = torch.device("cuda", self.device_ids[0])
            inputs, kwargs = move_to(inputs, device), move_to(kwargs, device)
        output = self.module(*inputs, **kwargs)
        if training and self.find_unused_parameters:
            reached = _reachable_leaves(output)
            self._used = {i for i, acc in enumerate(self._accumulators) if acc in reached}
            self._carried = sorted(i for i in self._accumulated - self._used
                                   if self._dk_params[i].grad is not None)
            self._used.update(self._carried)  # the reducer writes theirs back
            self._prepare_unused()
        return output

    def _prepare_unused(self) -> None:
        unused = [i for i in range(len(self._dk_params)) if i not in self._used]
        array = (ctypes.c_int32 * max(1, len(unused)))(*unused)
        raise_for_status(lib.dk_reducer_prepare, self._reducer.handle, array, len(unused))

    @contextlib.contextmanager
    def no_sync(self):
        """A forward inside leaves its backward unreduced (gradients
        accumulate locally), wherever that backward runs, as in torch's DDP;
        the next backward of a forward outside reduces the accumulated
        values."""
        old = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = old

    @property
    def num_buckets(self) -> int:
        return lib.dk_reducer_num_buckets(self._reducer.handle)

    # -- mmengine's steps -------------------------------------------------------------

    def train_step(self, data, optim_wrapper) -> Dict[str, torch.Tensor]:
        """mmengine's: preprocess, forward in 'loss' mode (no_sync while the
        optimizer wrapper only accumulates), parse the losses, update."""
        with optim_wrapper.optim_context(self):
            preprocessor = getattr(self.module, "data_preprocessor", None)
            if preprocessor is not None:
                data = preprocessor(data, training=True)
            losses = self._run_forward(data, mode="loss")
        parse = getattr(self.module, "parse_losses", parse_losses)
        parsed_loss, log_vars = parse(losses)
        optim_wrapper.update_params(parsed_loss)
        if self.detect_anomalous_params:
            self._detect_anomalous_params(parsed_loss)
        return log_vars

    def val_step(self, data) -> list:
        return self.module.val_step(data)

    def test_step(self, data) -> list:
        return self.module.test_step(data)

    def _run_forward(self, data, mode: str):
        return run_forward(self, data, mode)

    def _detect_anomalous_params(self, loss: torch.Tensor) -> None:
        reached = _reachable_leaves(loss)
        for name, p in self.module.named_parameters():
            if p.requires_grad and p.expand_as(p).grad_fn.next_functions[0][0] not in reached:
                print(f"rank {dist.get_rank()}: {name} with shape {tuple(p.size())} is not in the "
                      "computational graph")


class MMSeparateDistributedDataParallel(torch.nn.Module):
    """mmengine's MMSeparateDistributedDataParallel: each direct child with
    trainable parameters is wrapped in its own MMDistributedDataParallel;
    the others are kept as they are. Steps go to the wrapped module.
    ``broadcast_buffers`` defaults to True, the seed's default (mmengine's
    is False; see the README's compatibility table)."""

    def __init__(self, module: torch.nn.Module, broadcast_buffers: bool = True,
                 find_unused_parameters: bool = False, **kwargs):
        super().__init__()
        self.module = module
        for name, sub in list(module._modules.items()):
            if sub is not None and any(p.requires_grad for p in sub.parameters()):
                sub = MMDistributedDataParallel(sub, broadcast_buffers=broadcast_buffers,
                                                find_unused_parameters=find_unused_parameters,
                                                **kwargs)
            module._modules[name] = sub

    def train_step(self, data, optim_wrapper):
        return self.module.train_step(data, optim_wrapper)

    def val_step(self, data) -> list:
        return self.module.val_step(data)

    def test_step(self, data) -> list:
        return self.module.test_step(data)

    @contextlib.contextmanager
    def no_sync(self):
        with contextlib.ExitStack() as stack:
            for sub in self.module._modules.values():
                if isinstance(sub, MMDistributedDataParallel):
                    stack.enter_context(sub.no_sync())
            yield

    def train(self, mode: bool = True):
        self.training = mode
        self.module.train(mode)
        return self


for _wrapper in (MMDistributedDataParallel, MMSeparateDistributedDataParallel,
                 MMFullyShardedDataParallel, FullyShardedDataParallel):
    DISTKIT_MODEL_WRAPPERS.register_module(module=_wrapper, force=True)


def is_model_wrapper(model: torch.nn.Module, registry=MODEL_WRAPPERS) -> bool:
    """mmengine's is_model_wrapper: whether ``model`` is an instance of a
    class registered in ``registry`` or in one of its children (never its
    parents). The default, distkit.registry.MODEL_WRAPPERS, is mmengine's
    registry where mmengine can be imported; distkit's wrappers are in its
    child of scope "distkit", torch's DistributedDataParallel and
    DataParallel in the registry itself, and so are wrappers users register."""
    if isinstance(model, tuple(registry.module_dict.values())):
        return True
    return any(is_model_wrapper(model, child) for child in registry.children.values())
