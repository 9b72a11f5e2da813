"""Gradient clipping by the norm over every shard (torch's
FullyShardedDataParallel.clip_grad_norm_): each rank's norm of the gradients
it holds, the parts of sharded ones combined over the shard group (a sum of
p-th powers, the maximum for the infinity norm), so every rank finds the
same total norm and scales its gradients by the same factor, as
torch.nn.utils.clip_grad_norm_ does on one process over the full
gradients."""
import math
from typing import Iterable, Set

import torch

from .. import dist


def clip_sharded_grad_norm_(params: Iterable[torch.Tensor], sharded: Set[int], group,
                            max_norm: float, norm_type: float = 2.0,
                            error_if_nonfinite: bool = False) -> torch.Tensor:
    """Scales the gradients of `params` so that their total norm is at most
    `max_norm`; returns the total norm (before clipping, float32, the same on
    every rank). `sharded`: ids of the tensors that hold this rank's part of
    a gradient (the others hold all of it, the same on every rank: counted
    once). Collective over `group` when any rank's part is sharded, which
    is the same on every rank for one model. error_if_nonfinite: a total
    that is inf or nan raises (on every rank: the total is the same) before
    anything is scaled, as torch's does."""
    norm_type = float(norm_type)
    if not norm_type > 0:  # -inf and nan too, as C++ refuses them
        raise ValueError(f"clip_grad_norm_: norm_type must be positive or inf, got {norm_type}")
    grads = [(p.grad, id(p) in sharded) for p in params if p.grad is not None]

    def part(tensors):
        """Of the p-th powers' sum (the maximum for inf), in float64."""
        norms = [torch.linalg.vector_norm(g.detach().double(), norm_type) for g in tensors]
        if not norms:
            return torch.zeros((), dtype=torch.float64)
        if math.isinf(norm_type):
            return torch.stack(norms).max()
        return (torch.stack(norms) ** norm_type).sum()

    local = part([g for g, s in grads if s]).reshape(1)
    replicated = part([g for g, s in grads if not s])
    if sharded and dist.is_distributed() and dist.get_world_size(group) > 1:
        if math.isinf(norm_type):
            # A maximum compares, and every comparison with NaN is false: one
            # rank's NaN would vanish. It travels as a flag beside the value.
            nan = torch.isnan(local)
            pair = torch.cat([torch.where(nan, torch.zeros_like(local), local),
                              nan.to(local.dtype)])
            dist.all_reduce(pair, "max", group=group)
            local = torch.where(pair[1:] > 0, torch.full_like(local, math.nan), pair[:1])
        else:
            dist.all_reduce(local, "sum", group=group)
    if math.isinf(norm_type):
        total = torch.maximum(local[0], replicated)
    else:
        total = (local[0] + replicated) ** (1.0 / norm_type)
    total = total.to(torch.float32)
    if error_if_nonfinite and not torch.isfinite(total):
        raise RuntimeError(
            f"The total norm of order {norm_type} for gradients from `parameters` is "
            "non-finite, so it cannot be clipped. To disable this error and scale the "
            "gradients by the non-finite norm anyway, set `error_if_nonfinite=False`")
    # torch.nn.utils.clip_grad_norm_'s factor: max_norm / (norm + 1e-6), at most 1.
    coefficient = torch.clamp(max_norm / (total.double() + 1e-6), max=1.0)
    with torch.no_grad():
        for g, _ in grads:
            g.mul_(coefficient.to(g.dtype))
    return total


def sharded_ids(units, orig_params: bool) -> Set[int]:
    """The ids of the tensors the optimizer steps that hold a part of a
    sharded gradient: the units' flat shards (or, use_orig_params, the
    original parameters) where a unit is split over more than one rank."""
    out: Set[int] = set()
    for unit in units:
        if unit.shard_count <= 1:
            continue
        if orig_params:
            out.update(id(p) for _, _, p in unit.owned)
        else:
            out.update(id(f) for f in unit.flat_params)
    return out
