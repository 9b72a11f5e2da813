"""mmengine's Runner checkpoints and resumes MMFullyShardedDataParallel
exactly at more than one rank, with distkit.hooks.FSDPCheckpointHook in its
custom hooks.

mmengine cannot be installed here, so ``Runner`` below makes the calls
mmengine 0.11's Runner makes (read for what it calls) in their order: hooks
sorted by priority; train() builds the optim wrapper over
``model.module.parameters()`` and the schedulers, calls ``before_run``,
broadcasts ``model.module.state_dict()`` from rank 0
(_init_model_weights), then resumes; each epoch trains through
``model.train_step``, steps the scheduler (ParamSchedulerHook) and has
CheckpointHook call ``save_checkpoint`` on every rank, which is master-only:
rank 0 alone builds the checkpoint from ``model.module.state_dict()``,
``optim_wrapper.state_dict()`` and the schedulers' state, calls
``before_save_checkpoint`` and writes the file. ``resume`` loads the file
on every rank, calls ``after_load_checkpoint``, loads the model state into
``model.module`` module by module (mmengine's load_state_dict:
``_load_from_state_dict`` of each), then the epoch and iteration,
``optim_wrapper.load_state_dict`` and the schedulers'.

For both use_orig_params values (SGD with momentum, Adam): a run of 2
epochs checkpointing each epoch; a new Runner on a model initialized
otherwise resumes from epoch 1's checkpoint and trains epoch 2. Its final
parameters, optimizer state (full, every rank's shards), learning rate and
counters equal the uninterrupted run's (<= 1e-6); the checkpoint loads into
the plain module (strict). Then the same resume on one rank fewer (a group
of the first world size - 1 ranks, the same global batch), which a full
checkpoint allows. Without the hook, the Runner's checkpoint holds rank 0's
shards alone and resuming it fails."""
import os
import shutil
import sys
import tempfile
import time

import torch

from distkit import dist
from distkit.fsdp import FullyShardedDataParallel
from distkit.hooks import FSDPCheckpointHook
from distkit.model import MMFullyShardedDataParallel
from testing.python.mm_fsdp_model import Block, Net
from testing.python.rank_check import check, finish

GLOBAL_BATCH, ITERS_PER_EPOCH, EPOCHS = 6, 2, 2
PRIORITY = {"VERY_HIGH": 10, "HIGH": 30, "NORMAL": 50, "LOW": 70, "VERY_LOW": 90}


class OptimWrapper:
    """mmengine's OptimWrapper: update_params = backward, step, zero_grad;
    state_dict / load_state_dict are the optimizer's."""

    def __init__(self, optimizer):
        self.optimizer = optimizer

    def optim_context(self, model):
        import contextlib
        return contextlib.nullcontext()

    def update_params(self, loss):
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad()

    def state_dict(self):
        return self.optimizer.state_dict()

    def load_state_dict(self, state):
        self.optimizer.load_state_dict(state)


class CheckpointHook:
    """mmengine's CheckpointHook (interval 1, by epoch): every rank calls
    runner.save_checkpoint."""
    priority = "VERY_LOW"

    def after_train_epoch(self, runner):
        runner.save_checkpoint(runner.work_dir, f"epoch_{runner.epoch + 1}.pth")


class ParamSchedulerHook:
    priority = "LOW"

    def after_train_epoch(self, runner):
        for scheduler in runner.param_schedulers:
            scheduler.step()


def load_state_dict(module, state_dict):
    """mmengine's load_state_dict (strict=False, as the Runner's resume):
    each module's _load_from_state_dict with its part of the dict (no
    module.load_state_dict call); error messages only printed."""
    missing, unexpected, errors = [], [], []

    def load(mod, local, prefix=""):
        mod._load_from_state_dict(local, prefix, {}, True, missing, unexpected, errors)
        for name, child in mod._modules.items():
            if child is not None:
                child_prefix = prefix + name + "."
                load(child, {k: v for k, v in local.items() if k.startswith(child_prefix)},
                     child_prefix)

    load(module, dict(state_dict))
    if errors:
        print("\n".join(errors), flush=True)


class Runner:
    """What mmengine 0.11's Runner calls for training, checkpoints and
    resume (see the module's text)."""

    def __init__(self, model, work_dir, optimizer, custom_hooks, group=None, resume_from=None):
        self.model, self.work_dir, self.group = model, work_dir, group
        self.optim_wrapper = optimizer  # a config until train() builds it
        self.resume_from = resume_from
        hooks = [ParamSchedulerHook(), CheckpointHook()] + list(custom_hooks)
        self._hooks = sorted(hooks, key=lambda h: PRIORITY[h.priority])  # stable, as mmengine's
        self.epoch = self.iter = 0

    def call_hook(self, name, **kwargs):
        for hook in self._hooks:
            if hasattr(hook, name):
                getattr(hook, name)(self, **kwargs)

    def train(self):
        kind, lr = self.optim_wrapper
        self.optim_wrapper = OptimWrapper(kind(self.model.module.parameters(), lr=lr))
        self.param_schedulers = [
            torch.optim.lr_scheduler.StepLR(self.optim_wrapper.optimizer, 1, gamma=0.5)]
        self.call_hook("before_run")
        for value in self.model.module.state_dict().values():  # _init_model_weights
            dist.broadcast(value, 0, group=self.group)
        if self.resume_from:
            self.resume(self.resume_from)
        while self.epoch < EPOCHS:
            for i in range(ITERS_PER_EPOCH):
                self.model.train_step(mine(self.iter, self.group), self.optim_wrapper)
                self.iter += 1
            self.call_hook("after_train_epoch")
            self.epoch += 1
        self.call_hook("after_run")

    def save_checkpoint(self, out_dir, filename, file_client_args=None, save_optimizer=True,
                        save_param_scheduler=True, meta=None, by_epoch=True, backend_args=None):
        if dist.get_rank() != 0:  # master_only
            return
        cpu = lambda x: x.cpu() if isinstance(x, torch.Tensor) else x
        checkpoint = {
            "meta": {"epoch": self.epoch + 1, "iter": self.iter},
            "state_dict": {k: v.cpu() for k, v in self.model.module.state_dict().items()},
            "optimizer": apply(self.optim_wrapper.state_dict(), cpu),
            "param_schedulers": [s.state_dict() for s in self.param_schedulers],
        }
        self.call_hook("before_save_checkpoint", checkpoint=checkpoint)
        torch.save(checkpoint, os.path.join(out_dir, filename))

    def resume(self, filename):
        checkpoint = torch.load(filename, map_location="cpu")
        self.call_hook("after_load_checkpoint", checkpoint=checkpoint)
        load_state_dict(self.model.module, checkpoint["state_dict"])
        self.epoch, self.iter = checkpoint["meta"]["epoch"], checkpoint["meta"]["iter"]
        self.optim_wrapper.load_state_dict(checkpoint["optimizer"])
        for scheduler, saved in zip(self.param_schedulers, checkpoint["param_schedulers"]):
            scheduler.load_state_dict(saved)


def apply(value, fn):
    if isinstance(value, dict):
        return type(value)((k, apply(v, fn)) for k, v in value.items())
    if isinstance(value, list):
        return [apply(v, fn) for v in value]
    return fn(value)


def mine(step, group=None):
    """This rank's part of the global batch of `step` (the same global batch
    at every world size)."""
    g = torch.Generator().manual_seed(500 + step)
    x, y = torch.randn(GLOBAL_BATCH, 4, generator=g), torch.randn(GLOBAL_BATCH, 2, generator=g)
    n, r = dist.get_world_size(group), dist.get_rank(group)
    local = GLOBAL_BATCH // n
    return {"inputs": x[r * local:(r + 1) * local], "targets": y[r * local:(r + 1) * local]}


def wrap(orig_params, seed, group=None):
    torch.manual_seed(seed)
    return MMFullyShardedDataParallel(
        Net(), process_group=group, use_orig_params=orig_params,
        auto_wrap_policy={"type": "torch.distributed.fsdp.wrap.ModuleWrapPolicy",
                          "module_classes": [Block]})


def flatten(state, prefix=""):
    """name -> tensor or number, for comparing nested state dicts."""
    out = {}
    for key, value in state.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        elif isinstance(value, list):
            out.update(flatten(dict(enumerate(value)), f"{prefix}{key}."))
        else:
            out[prefix + str(key)] = value
    return out


def difference(got, want) -> float:
    """The worst relative difference between two nested states (inf where
    the keys or the non-tensor values differ)."""
    got, want = flatten(got), flatten(want)
    if got.keys() != want.keys():
        return float("inf")
    worst = 0.0
    for key, w in want.items():
        g = got[key]
        if isinstance(w, torch.Tensor):
            if g.shape != w.shape:
                return float("inf")
            d = (g.double() - w.double()).norm() / w.double().norm().clamp_min(1e-30)
            worst = max(worst, d.item())
        elif g != w:
            return float("inf")
    return worst


def final_state(runner):
    """Everything a resumed run must have equal: full parameters, the full
    optimizer state, the learning rate and the counters (collective)."""
    model, optimizer = runner.model, runner.optim_wrapper.optimizer
    return {"model": model.state_dict(),
            "optimizer": FullyShardedDataParallel.optim_state_dict(model, optimizer),
            "lr": [g["lr"] for g in optimizer.param_groups],
            "counters": {"epoch": runner.epoch, "iter": runner.iter}}


def shared_dir():
    path = tempfile.mkdtemp(prefix="fsdp_runner_") if dist.get_rank() == 0 else None
    return dist.all_gather_object(path)[0]


def resume_exactly(orig_params):
    what = f"use_orig_params={orig_params}"
    optimizer = (torch.optim.Adam, 0.01) if orig_params else (torch.optim.SGD, 0.2)
    work_dir = shared_dir()
    started = time.monotonic()

    # Uninterrupted: 2 epochs, a checkpoint after each.
    first = Runner(wrap(orig_params, seed=0), work_dir, optimizer, [FSDPCheckpointHook()])
    first.train()
    want = final_state(first)
    dist.barrier()  # the files are written
    epoch1 = os.path.join(work_dir, "epoch_1.pth")

    # The checkpoint is what one process would have saved.
    saved = torch.load(os.path.join(work_dir, "epoch_2.pth"), map_location="cpu")
    plain = Net()
    plain.load_state_dict(saved["state_dict"])  # strict: the module's own keys and shapes
    check(difference(plain.state_dict(), want["model"]) == 0,
          f"{what}: epoch 2's checkpoint is not the full model")
    check(difference(saved["optimizer"], want["optimizer"]) == 0,
          f"{what}: epoch 2's checkpoint is not the full optimizer state")

    # A new Runner, another initialization, resumed from epoch 1.
    second = Runner(wrap(orig_params, seed=7 + dist.get_rank()), work_dir, optimizer,
                    [FSDPCheckpointHook()], resume_from=epoch1)
    second.train()
    worst = difference(final_state(second), want)
    check(worst <= 1e-6, f"{what}: resumed at world size {dist.get_world_size()} differs from "
          f"the uninterrupted run by {worst:.2e}")

    # On one rank fewer: the first world size - 1 ranks.
    n = dist.get_world_size()
    fewer = dist.new_group(list(range(n - 1)))
    worst_fewer = 0.0
    if dist.get_rank() < n - 1:
        third = Runner(wrap(orig_params, seed=11, group=fewer), work_dir, optimizer,
                       [FSDPCheckpointHook()], group=fewer, resume_from=epoch1)
        third.work_dir = tempfile.mkdtemp(prefix="fsdp_runner_fewer_") \
            if dist.get_rank() == 0 else None
        third.train()
        got = final_state(third)
        worst_fewer = difference(got, want)
        check(worst_fewer <= 1e-6, f"{what}: resumed at world size {n - 1} differs from the "
              f"uninterrupted run at {n} by {worst_fewer:.2e}")
        if dist.get_rank() == 0:
            shutil.rmtree(third.work_dir)
    dist.barrier()

    # Without the hook: rank 0's shards alone; resuming them fails.
    bare_dir = shared_dir()
    bare = Runner(wrap(orig_params, seed=0), bare_dir, optimizer, [])
    bare.train()
    dist.barrier()
    try:
        Runner(wrap(orig_params, seed=7), bare_dir, optimizer, [],
               resume_from=os.path.join(bare_dir, "epoch_1.pth")).train()
        check(False, f"{what}: a checkpoint of rank 0's shards resumed")
    except (RuntimeError, ValueError) as e:
        check("is one rank's shard" in str(e) and "FSDPCheckpointHook" in str(e),
              f"{what}: resuming rank 0's shards: {e}")
    dist.barrier()
    if dist.get_rank() == 0:
        shutil.rmtree(work_dir)
        shutil.rmtree(bare_dir)
        print(f"{what}: resumed within {worst:.1e} at {n} ranks, {worst_fewer:.1e} at "
              f"{n - 1}; {time.monotonic() - started:.1f} s", flush=True)


def main():
    dist.init_dist("pytorch", backend="gloo")
    check(dist.get_world_size() >= 2, "this test needs at least 2 ranks")
    for orig_params in (False, True):
        resume_exactly(orig_params)
    status = finish("mmengine Runner resume of FSDP")
    dist.destroy()
    return status


if __name__ == "__main__":
    sys.exit(main())
