"""MMFullyShardedDataParallel driven as mmengine's Runner drives a model
wrapper (mmengine 0.11, read for what it calls; mmengine itself cannot be
installed here), with both use_orig_params values:

  - Runner.train's _init_model_weights: every entry of
    ``model.module.state_dict()`` broadcast from rank 0 in place;
  - the optimizer is built from ``model.module.parameters()`` (its optimizer
    constructor unwraps a wrapper through ``.module``);
  - ``train_step(data, optim_wrapper)`` with an OptimWrapper made as
    mmengine's is with ``clip_grad=dict(max_norm=...)``: its ``clip_func``
    is torch.nn.utils.clip_grad_norm_ over the optimizer's parameters;
  - the Runner's checkpoint runs on rank 0 alone (save_checkpoint is
    master-only): ``model.module.state_dict()`` and mmengine's
    get_state_dict (every submodule's _save_to_state_dict) there must
    finish without a collective (one would hang: the job's time bound);
  - the full checkpoint through the wrapper's own methods on every rank,
    then resume into a fresh model and optimizer (the parameters loaded
    through ``model.module.load_state_dict``, as the Runner's load_from
    does, or the wrapper's), and train on; rank 0's module checkpoint
    loaded on every rank is refused, not loaded into other ranks' shards;
  - val_step / test_step.

Final parameters must be equal on every rank and equal to the same training
on one process (torch.nn.utils.clip_grad_norm_ on the full gradients, the
global batch), relative difference <= 1e-5. Then gradient clipping under
every sharding strategy (also the infinity norm through clip_grad_norm_),
error_if_nonfinite raising on every rank, and bad arguments failing on
every rank with the argument named."""
import sys

import torch
from torch import nn

from distkit import dist
from distkit.fsdp import FullyShardedDataParallel, ShardedGradScaler, ShardingStrategy
from distkit.fsdp.grad_scaler import agreeing
from distkit.model import MMFullyShardedDataParallel
from testing.python.mm_fsdp_model import Block, Net
from testing.python.rank_check import check, finish

LOCAL, LR, MAX_NORM = 2, 0.2, 0.05


class OptimWrapper:
    """What mmengine's OptimWrapper does with clip_grad=dict(max_norm=...):
    update_params = backward, clip (``clip_func``, torch's
    clip_grad_norm_, over the optimizer's parameters that have gradients),
    step, zero_grad."""

    def __init__(self, optimizer, clip_grad):
        self.optimizer = optimizer
        self.clip_func = torch.nn.utils.clip_grad_norm_
        self.clip_grad_kwargs = clip_grad
        self.norms = []

    def optim_context(self, model):
        import contextlib
        return contextlib.nullcontext()

    def update_params(self, loss):
        loss.backward()
        params = [p for g in self.optimizer.param_groups for p in g["params"]
                  if p.requires_grad and p.grad is not None]
        self.norms.append(float(self.clip_func(params, **self.clip_grad_kwargs)))
        self.optimizer.step()
        self.optimizer.zero_grad()


def get_state_dict(module, destination=None, prefix=""):
    """mmengine's get_state_dict: each module's _save_to_state_dict, its
    children's, then its state-dict hooks (no state_dict() call)."""
    destination = {} if destination is None else destination
    module._save_to_state_dict(destination, prefix, False)
    for name, child in module._modules.items():
        if child is not None:
            get_state_dict(child, destination, prefix + name + ".")
    for hook in module._state_dict_hooks.values():
        result = hook(module, destination, prefix, {})
        destination = destination if result is None else result
    return destination


def batch(step):
    g = torch.Generator().manual_seed(300 + step)
    n = dist.get_world_size()
    return torch.randn(n * LOCAL, 4, generator=g), torch.randn(n * LOCAL, 2, generator=g)


def mine(step):
    x, y = batch(step)
    r = dist.get_rank()
    return {"inputs": x[r * LOCAL:(r + 1) * LOCAL], "targets": y[r * LOCAL:(r + 1) * LOCAL]}


def reference(steps, norm_type=2.0):
    """One process, the global batch, torch's clip_grad_norm_: (its state
    dict, the norms it clipped by)."""
    torch.manual_seed(0)
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=LR, momentum=0.9)
    norms = []
    for step in range(steps):
        x, y = batch(step)
        net(x, y, mode="loss")["loss"].backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(net.parameters(), MAX_NORM,
                                                          norm_type)))
        opt.step()
        opt.zero_grad()
    return net, norms


def relative(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


def worst(got, want):
    return max(relative(got[k], want[k]) for k in want)


def same_on_every_rank(state, what):
    flat = torch.cat([v.reshape(-1).double() for v in state.values()])
    everyone = dist.all_gather(flat)
    check(all(torch.equal(e, flat) for e in everyone), f"{what}: parameters differ across ranks")


def wrap(orig_params, strategy="FULL_SHARD", seed=0):
    torch.manual_seed(seed)
    return MMFullyShardedDataParallel(
        Net(), sharding_strategy=strategy, use_orig_params=orig_params,
        auto_wrap_policy={"type": "torch.distributed.fsdp.wrap.ModuleWrapPolicy",
                          "module_classes": [Block]},
        sync_module_states=True)


def runner_like(orig_params):
    what = f"runner (use_orig_params={orig_params})"
    rank = dist.get_rank()
    model = wrap(orig_params)
    inner = model.module  # mmengine's optimizer constructor unwraps .module
    for value in inner.state_dict().values():  # Runner._init_model_weights' sync
        dist.broadcast(value, 0)
    params = list(inner.parameters())
    check(len(params) > 0, f"{what}: model.module.parameters() is empty")
    check({id(p) for p in params} == {id(p) for p in model.parameters()},
          f"{what}: the module's and the wrapper's parameters differ")
    opt = torch.optim.SGD(params, lr=LR, momentum=0.9)
    wrapper = OptimWrapper(opt, dict(max_norm=MAX_NORM))
    for step in range(2):
        log = model.train_step(mine(step), wrapper)
        check("loss" in log, f"{what}: train_step's log_vars {list(log)}")

    # The Runner's save_checkpoint: rank 0 alone; the others go on to the
    # barrier. A collective in there would never complete.
    local = None
    if rank == 0:
        local = inner.state_dict()
        walked = get_state_dict(inner)
        opt.state_dict()
        check(list(local) == list(walked) and len(local) > 0 and all(
            torch.equal(local[k], walked[k]) for k in local),
              f"{what}: rank 0's module state dict {list(local)} / {list(walked)}")
    dist.barrier()
    local = dist.all_gather_object(local)[0]  # the Runner's checkpoint file, read by all

    # The full checkpoint through the wrapper's methods, on every rank.
    full = model.state_dict()
    osd = FullyShardedDataParallel.optim_state_dict(model, opt)
    ref2, ref_norms = reference(2)
    check(worst(full, ref2.state_dict()) <= 1e-5,
          f"{what}: after 2 steps differs from one process by "
          f"{worst(full, ref2.state_dict()):.2e}")
    check(all(abs(a - b) <= 1e-5 * b for a, b in zip(wrapper.norms, ref_norms)),
          f"{what}: clipped by norms {wrapper.norms}, one process {ref_norms}")
    check(min(ref_norms) > 2 * MAX_NORM, f"{what}: the gradients were not clipped {ref_norms}")
    model.train_step(mine(2), wrapper)  # lost: resume starts from the checkpoint

    resumed = wrap(orig_params, seed=1 + rank)  # another start: all from the checkpoint
    before = resumed.state_dict()
    try:
        resumed.module.load_state_dict(local)
        check(dist.get_world_size() == 1, f"{what}: rank 0's shards loaded on every rank")
    except RuntimeError as e:
        check("is one rank's shard" in str(e), f"{what}: loading rank 0's shards: {e}")
    check(worst(resumed.state_dict(), before) == 0, f"{what}: a refused load changed the model")
    if orig_params:
        resumed.load_state_dict(full)
    else:  # as the Runner's load_from does: into model.module, on every rank
        resumed.module.load_state_dict(full)
    check(worst(resumed.state_dict(), full) == 0, f"{what}: the full checkpoint loaded")
    opt2 = torch.optim.SGD(list(resumed.module.parameters()), lr=1.0, momentum=0.5)
    opt2.load_state_dict(FullyShardedDataParallel.optim_state_dict_to_load(resumed, opt2, osd))
    wrapper2 = OptimWrapper(opt2, dict(max_norm=MAX_NORM))
    for step in range(2, 4):
        resumed.train_step(mine(step), wrapper2)
    final = resumed.state_dict()
    ref4, _ = reference(4)
    difference = worst(final, ref4.state_dict())
    check(difference <= 1e-5, f"{what}: resumed training differs from one process by "
          f"{difference:.2e}")
    same_on_every_rank(final, what)

    x, _ = batch(9)
    predicted = resumed.val_step({"inputs": x})
    tested = resumed.test_step({"inputs": x})
    with torch.no_grad():
        want = ref4(x, mode="predict")
    check(len(predicted) == len(want) and all(
        torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(predicted, want)) and all(
        torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(tested, want)),
          f"{what}: val_step / test_step predictions")
    if rank == 0:
        print(f"{what}: resumed, worst relative difference {difference:.2e}", flush=True)


def clipping(strategy, orig_params, norm_type):
    """Two steps clipped under `strategy`: through mmengine's OptimWrapper
    path (train_step) for the 2-norm, through clip_grad_norm_ itself for
    others; the total norm is the one-process norm on every rank."""
    what = f"clip {strategy.name} (use_orig_params={orig_params}, norm {norm_type})"
    model = wrap(orig_params, strategy)
    opt = torch.optim.SGD(model.module.parameters(), lr=LR, momentum=0.9)
    norms = []
    for step in range(2):
        if norm_type == 2.0:
            wrapper = OptimWrapper(opt, dict(max_norm=MAX_NORM))
            model.train_step(mine(step), wrapper)
            norms += wrapper.norms
            continue
        data = mine(step)
        model(**data, mode="loss")["loss"].backward()
        norms.append(float(model.clip_grad_norm_(MAX_NORM, norm_type)))
        opt.step()
        opt.zero_grad()
    net, ref_norms = reference(2, norm_type)
    full = model.state_dict()
    difference = worst(full, net.state_dict())
    check(difference <= 1e-5, f"{what}: differs from one process by {difference:.2e}")
    check(all(abs(a - b) <= 1e-5 * b for a, b in zip(norms, ref_norms)),
          f"{what}: norms {norms}, one process {ref_norms}")
    check(min(ref_norms) > 2 * MAX_NORM, f"{what}: nothing was clipped {ref_norms}")
    same_on_every_rank(full, what)


def nonfinite():
    """clip_grad_norm_'s error_if_nonfinite (mmengine passes clip_grad's
    keywords through): an inf in rank 0's shard alone makes every rank
    raise, since the total is agreed."""
    model = wrap(False)
    opt = torch.optim.SGD(model.module.parameters(), lr=LR)
    wrapper = OptimWrapper(opt, dict(max_norm=MAX_NORM, error_if_nonfinite=True))
    data = mine(0)
    model(**data, mode="loss")["loss"].backward()
    if dist.get_rank() == 0:
        next(p for p in model.module.parameters() if p.grad is not None).grad[0] = float("inf")
    try:
        wrapper.clip_func = model._clip  # what train_step sets
        wrapper.clip_func(list(model.module.parameters()), **wrapper.clip_grad_kwargs)
        check(False, "a non-finite total norm was clipped")
    except RuntimeError as e:
        check("non-finite" in str(e), f"error_if_nonfinite: {e}")
    # A NaN in the last rank's shard alone: the infinity norm is NaN on every
    # rank too (a maximum reduction would drop it: comparisons with NaN are
    # false).
    for p in model.module.parameters():
        p.grad = None
    model(**data, mode="loss")["loss"].backward()
    if dist.get_rank() == dist.get_world_size() - 1:
        next(p for p in model.module.parameters() if p.grad is not None).grad[0] = float("nan")
    total = model.clip_grad_norm_(MAX_NORM, float("inf"))
    check(bool(torch.isnan(total)), f"a NaN in one rank's shard: infinity norm {total}")
    dist.barrier()


class AmpOptimWrapper(OptimWrapper):
    """What mmengine's AmpOptimWrapper does: backward on the scaled loss;
    step = unscale_ and clip (with clip_grad), loss_scaler.step (skipped on
    an inf), loss_scaler.update. ``inject`` runs between backward and step
    (an overflow put into one rank's gradients)."""

    def __init__(self, optimizer, clip_grad, loss_scaler, inject=None):
        super().__init__(optimizer, clip_grad)
        self.loss_scaler = loss_scaler
        self.inject = inject or (lambda: None)

    def update_params(self, loss):
        self.loss_scaler.scale(loss).backward()
        self.inject()
        self.loss_scaler.unscale_(self.optimizer)
        params = [p for g in self.optimizer.param_groups for p in g["params"]
                  if p.requires_grad and p.grad is not None]
        self.clip_func(params, **self.clip_grad_kwargs)
        self.loss_scaler.step(self.optimizer)
        self.loss_scaler.update()
        self.optimizer.zero_grad()


def amp_skips_together():
    """An inf in rank 0's shard alone at step 1: every rank skips that step
    and backs the scale off (found-inf agreed over the ranks, as torch's
    sharded scaler does); steps 0, 2, 3 equal one process that skipped step
    1, and two finite steps after it grow the scale back."""
    what = "AMP found-inf"
    model = wrap(False)
    opt = torch.optim.SGD(model.module.parameters(), lr=LR, momentum=0.9)
    scaler = ShardedGradScaler(init_scale=2.0**10, growth_interval=2)
    check(agreeing(scaler) is scaler, f"{what}: a ShardedGradScaler is kept")
    step_now = [0]

    def inject():
        if step_now[0] == 1 and dist.get_rank() == 0:
            next(p for p in model.module.parameters() if p.grad is not None).grad[0] = \
                float("inf")
    wrapper = AmpOptimWrapper(opt, dict(max_norm=MAX_NORM), scaler, inject)
    scales = []
    for step in range(4):
        step_now[0] = step
        model.train_step(mine(step), wrapper)
        scales.append(wrapper.loss_scaler.get_scale())
        if step == 0:
            after_first = model.state_dict()
        if step == 1:
            check(worst(model.state_dict(), after_first) == 0,
                  f"{what}: rank {dist.get_rank()} stepped where rank 0 overflowed")
    everyone = dist.all_gather_object(scales)
    check(all(s == scales for s in everyone) and scales == [2.0**10, 2.0**9, 2.0**9, 2.0**10],
          f"{what}: scales {everyone}")
    torch.manual_seed(0)
    net = Net()
    ref = torch.optim.SGD(net.parameters(), lr=LR, momentum=0.9)
    for step in (0, 2, 3):
        x, y = batch(step)
        net(x, y, mode="loss")["loss"].backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), MAX_NORM)
        ref.step()
        ref.zero_grad()
    full = model.state_dict()
    difference = worst(full, net.state_dict())
    check(difference <= 1e-5, f"{what}: differs from one process skipping step 1 by "
          f"{difference:.2e}")
    same_on_every_rank(full, what)


def bad_arguments():
    """A clear error naming the argument, on every rank, before any
    collective (the barrier after them would see a rank stuck in one)."""
    cases = [
        ("module", lambda: MMFullyShardedDataParallel(nn.ReLU()), "has no parameters"),
        ("sharding_strategy",
         lambda: MMFullyShardedDataParallel(Net(), sharding_strategy="FULL_SHARDED"),
         "'FULL_SHARDED' is not a sharding strategy"),
        ("device_id", lambda: MMFullyShardedDataParallel(Net(), device_id=0),
         "names a CUDA device, but this machine has none"),
    ]
    if torch.cuda.is_available():
        cases.pop(2)
    for argument, make, text in cases:
        try:
            make()
            check(False, f"bad {argument} accepted")
        except ValueError as e:
            message = str(e)
            check(message.startswith("MMFullyShardedDataParallel: ") and argument in message
                  and text in message, f"bad {argument}: {message}")
    dist.barrier()


def main():
    dist.init_dist("pytorch", backend="gloo")
    for orig_params in (False, True):
        runner_like(orig_params)
    strategies = list(ShardingStrategy)
    for i, strategy in enumerate(strategies):
        clipping(strategy, i % 2 == 1, 2.0)
    clipping(ShardingStrategy.FULL_SHARD, False, float("inf"))
    clipping(ShardingStrategy.SHARD_GRAD_OP, True, 3.0)
    nonfinite()
    amp_skips_together()
    bad_arguments()
    status = finish("FSDP under mmengine's Runner calls")
    dist.destroy()
    return status


if __name__ == "__main__":
    sys.exit(main())
