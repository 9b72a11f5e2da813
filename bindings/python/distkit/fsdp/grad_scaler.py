"""torch's FSDP ShardedGradScaler on distkit: dynamic loss scaling whose
found-inf decision is agreed across ranks. Each rank checks only the
gradients it holds (its shards), so an overflow in one rank's shard must
make every rank skip the step and back off the scale, or the ranks' shards
and scales diverge: after unscaling, the found-inf flags are all-reduced
with max over ``process_group`` (default: the world), as torch's does.

Also on CPU, as torch 2.x's ShardedGradScaler is (Debian's torch 1.13 has
CUDA kernels only for the unscale and scale update, and its GradScaler
disables itself without CUDA): the unscale, the inf check and the scale
update are written here with plain tensor operations on the gradients'
device."""
import warnings
from collections import defaultdict

import torch
try:  # torch 2.x: the device-generic scaler, torch.cuda.amp's GradScaler's base
    from torch.amp.grad_scaler import GradScaler, _refresh_per_optimizer_state
except ImportError:  # torch 1.13
    from torch.cuda.amp.grad_scaler import GradScaler, _refresh_per_optimizer_state

from .. import dist


class ShardedGradScaler(GradScaler):
    """GradScaler whose skipped steps agree across ``process_group``."""

    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000,
                 enabled: bool = True, process_group=None):
        with warnings.catch_warnings():  # "CUDA is not available. Disabling.": not here
            warnings.simplefilter("ignore")
            # Keywords: torch 2.x's base takes `device` first.
            super().__init__(init_scale=init_scale, growth_factor=growth_factor,
                             backoff_factor=backoff_factor, growth_interval=growth_interval,
                             enabled=enabled)
        self.process_group = process_group
        if enabled and not self._enabled:  # no CUDA: scale on CPU
            if not growth_factor > 1.0 or not backoff_factor < 1.0:
                raise ValueError("ShardedGradScaler: growth_factor must be > 1.0 and "
                                 "backoff_factor < 1.0")
            self._enabled = True
            self._init_scale = init_scale
            self._scale = None
            self._growth_factor = growth_factor
            self._backoff_factor = backoff_factor
            self._growth_interval = growth_interval
            self._init_growth_tracker = 0
            self._growth_tracker = None
            self._per_optimizer_states = defaultdict(_refresh_per_optimizer_state)

    def scale(self, outputs):
        """``outputs`` (a tensor, or lists / tuples of them) times the scale."""
        if not self._enabled:
            return outputs
        if isinstance(outputs, torch.Tensor):
            if self._scale is None:
                self._lazy_init_scale_growth_tracker(outputs.device)
            return outputs * self._scale.to(device=outputs.device, non_blocking=True)
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        raise ValueError("outputs must be a Tensor or an iterable of Tensors")

    def _unscale_grads_(self, optimizer, inv_scale, found_inf, allow_fp16):
        """Unscales this rank's gradients, then agrees on found_inf: 1 on
        every rank when any rank's gradients hold an inf or a NaN."""
        with torch.no_grad():
            for group in optimizer.param_groups:
                for param in group["params"]:
                    if param.grad is None:
                        continue
                    if not allow_fp16 and param.grad.dtype == torch.float16:
                        raise ValueError("Attempting to unscale FP16 gradients.")
                    grad = param.grad._values() if param.grad.is_sparse else param.grad
                    if not bool(torch.isfinite(grad).all()):
                        found_inf.fill_(1.0)
                    grad.mul_(inv_scale.to(device=grad.device, dtype=grad.dtype))
        agreed = found_inf.to(device="cpu", dtype=torch.float32).clone()
        if dist.is_distributed() and dist.get_world_size(self.process_group) > 1:
            dist.all_reduce(agreed, "max", group=self.process_group)
        found_inf.copy_(agreed.to(found_inf.device))
        return {found_inf.device: found_inf}

    def update(self, new_scale=None) -> None:
        """torch's update (backoff on an inf, growth after growth_interval
        finite steps), from the agreed found_inf, so the scale stays the same
        on every rank."""
        if not self._enabled:
            return
        _scale, _growth_tracker = self._check_scale_growth_tracker("update")
        if new_scale is not None:
            if isinstance(new_scale, float):
                _scale.fill_(new_scale)
            else:
                _scale.copy_(new_scale)
        else:
            found = [f for state in self._per_optimizer_states.values()
                     for f in state["found_inf_per_device"].values()]
            if not found:
                raise AssertionError("No inf checks were recorded prior to update.")
            if any(bool(f.item()) for f in found):
                _scale.mul_(self._backoff_factor)
                _growth_tracker.fill_(0)
            else:
                _growth_tracker.add_(1)
                if int(_growth_tracker.item()) == self._growth_interval:
                    _scale.mul_(self._growth_factor)
                    _growth_tracker.fill_(0)
        self._per_optimizer_states = defaultdict(_refresh_per_optimizer_state)


def agreeing(scaler, process_group=None):
    """``scaler`` (mmengine's AmpOptimWrapper's ``loss_scaler``) made to
    agree on skipped steps: a torch GradScaler in use becomes a
    ShardedGradScaler with its settings and state; a ShardedGradScaler
    (distkit's, or torch's, which agrees through torch.distributed) is kept."""
    if (not isinstance(scaler, GradScaler) or type(scaler).__name__ == "ShardedGradScaler"
            or not scaler.is_enabled()):
        return scaler
    state = scaler.state_dict()
    agreed = ShardedGradScaler(init_scale=state["scale"], growth_factor=state["growth_factor"],
                               backoff_factor=state["backoff_factor"],
                               growth_interval=state["growth_interval"],
                               process_group=process_group)
    agreed.load_state_dict(state)
    return agreed
