"""MMDistributedDataParallel and MMSeparateDistributedDataParallel driven as
mmengine's Runner drives a model wrapper (mmengine 0.11's Runner, read for
what it calls; mmengine itself cannot be installed here):

  - wrap_model: a model that is a wrapper already (``is_model_wrapper``:
    a class registered in MODEL_WRAPPERS or a child registry, users' own
    included) passes through untouched; anything else is wrapped;
  - build_optim_wrapper: the optimizer is built from the parameters of the
    model unwrapped through the registry (``model.module``); for the
    separate wrapper, one optimizer per child, as an OptimWrapperDict;
  - the train loop: ``train_step(data, optim_wrapper)`` on this rank's
    samples (DefaultSampler's round robin, no shuffle);
  - save_checkpoint on rank 0 alone (master_only): ``model.module``'s
    state dict and the optimizers' state, into a file;
  - resume: every rank loads the file into a fresh wrapped model's
    ``.module`` and its optimizers, and trains on.

Final parameters must be equal on every rank and equal to the same training
on one process over the global batches (relative difference <= 1e-5)."""
import os
import sys

import torch
from torch import nn

from distkit import dist
from distkit.model import (MMDistributedDataParallel, MMSeparateDistributedDataParallel,
                           OptimWrapper, is_model_wrapper)
from distkit.registry import MODEL_WRAPPERS, Registry
from testing.python.rank_check import check, finish

BATCH, ITERS, RESUME_AT, LR, TOLERANCE = 2, 4, 2, 0.1, 1e-5


class Net(nn.Module):
    """mmengine's model interface: data_preprocessor, forward(mode=...);
    two trainable children and one without parameters."""

    def __init__(self):
        super().__init__()
        self.gen = nn.Linear(4, 6)
        self.act = nn.Tanh()
        self.head = nn.Linear(6, 2)

    def data_preprocessor(self, data, training=False):
        return data

    def forward(self, inputs, targets=None, mode="tensor"):
        out = self.head(self.act(self.gen(inputs)))
        if mode == "loss":
            return {"loss": ((out - targets) ** 2).mean()}
        return out

    def train_step(self, data, optim_wrapper):
        """A two-optimizer step (as a GAN's), for the separate wrapper: the
        head on detached features, then the generator through the head
        (whose gradients that leaves are dropped)."""
        inputs, targets = data["inputs"], data["targets"]
        heads, gens = optim_wrapper["head"], optim_wrapper["gen"]
        with heads.optim_context(self.head):
            loss = ((self.head(self.act(self.gen(inputs)).detach()) - targets) ** 2).mean()
        heads.update_params(loss)
        with gens.optim_context(self.gen):
            loss = ((self.head(self.act(self.gen(inputs))) - targets) ** 2).mean()
        gens.update_params(loss)
        heads.zero_grad()
        return {"loss": loss.detach()}


def dataset():
    g = torch.Generator().manual_seed(0)
    n = dist.get_world_size() * BATCH * ITERS
    return torch.randn(n, 4, generator=g), torch.randn(n, 2, generator=g)


def batch(it: int, rank: int, world: int):
    """Rank ``rank``'s batch ``it``: DefaultSampler(shuffle=False) gives
    rank r the samples r, r + world, ...; the loader cuts BATCH at a time."""
    x, y = dataset()
    mine = list(range(rank, len(x), world))[it * BATCH:(it + 1) * BATCH]
    return {"inputs": x[mine], "targets": y[mine]}


def global_batch(it: int, world: int):
    parts = [batch(it, r, world) for r in range(world)]
    return {k: torch.cat([p[k] for p in parts]) for k in ("inputs", "targets")}


# -- the Runner's steps ---------------------------------------------------------------


def wrap_model(model, wrapper=MMDistributedDataParallel):
    """Runner.wrap_model: a wrapper passes through untouched."""
    if is_model_wrapper(model):
        return model
    return wrapper(module=model)


def unwrap(model):
    return model.module if is_model_wrapper(model) else model


def build_optim_wrapper(model, separate: bool):
    inner = unwrap(model)

    def make(params):
        return OptimWrapper(torch.optim.SGD(params, lr=LR, momentum=0.9))
    if separate:
        return {name: make(unwrap(getattr(inner, name)).parameters()) for name in ("gen", "head")}
    return make(inner.parameters())


def optim_state(optim_wrapper):
    if isinstance(optim_wrapper, dict):
        return {k: w.optimizer.state_dict() for k, w in optim_wrapper.items()}
    return optim_wrapper.optimizer.state_dict()


def load_optim_state(optim_wrapper, state) -> None:
    if isinstance(optim_wrapper, dict):
        for k, w in optim_wrapper.items():
            w.optimizer.load_state_dict(state[k])
    else:
        optim_wrapper.optimizer.load_state_dict(state)


@dist.master_only
def save_checkpoint(model, optim_wrapper, path: str, it: int) -> None:
    """Runner.save_checkpoint (master-only): model.module's weights on the
    CPU, the optimizers' state, meta."""
    weights = {k: v.detach().cpu() for k, v in unwrap(model).state_dict().items()}
    torch.save({"meta": {"iter": it}, "state_dict": weights,
                "optimizer": optim_state(optim_wrapper)}, path)


def run(wrapper, path: str):
    """Train RESUME_AT iterations, checkpoint on rank 0, resume into a fresh
    model on every rank, train to ITERS. Returns the final parameters."""
    rank, world = dist.get_rank(), dist.get_world_size()
    separate = wrapper is MMSeparateDistributedDataParallel
    torch.manual_seed(100 + rank)  # rank 0's initial parameters are broadcast
    model = wrap_model(Net(), wrapper)
    check(isinstance(model, wrapper) and is_model_wrapper(model), f"{wrapper.__name__} wraps")
    optim_wrapper = build_optim_wrapper(model, separate)
    model.train()
    for it in range(RESUME_AT):
        model.train_step(batch(it, rank, world), optim_wrapper)
    save_checkpoint(model, optim_wrapper, path, RESUME_AT)
    dist.barrier()
    torch.manual_seed(200 + rank)  # overwritten by the checkpoint
    model = wrap_model(Net(), wrapper)
    optim_wrapper = build_optim_wrapper(model, separate)
    checkpoint = torch.load(path, map_location="cpu")
    unwrap(model).load_state_dict(checkpoint["state_dict"])
    load_optim_state(optim_wrapper, checkpoint["optimizer"])
    check(checkpoint["meta"]["iter"] == RESUME_AT, f"{wrapper.__name__}: checkpoint meta")
    model.train()
    for it in range(checkpoint["meta"]["iter"], ITERS):
        model.train_step(batch(it, rank, world), optim_wrapper)
    if separate:
        check(all(is_model_wrapper(getattr(unwrap(model), n)) for n in ("gen", "head"))
              and not is_model_wrapper(unwrap(model).act),
              "MMSeparateDistributedDataParallel wraps the children with parameters only")
    return {n.replace("module.", ""): p.detach().clone()
            for n, p in unwrap(model).named_parameters()}


def reference(separate: bool, world: int):
    """The same training on one process, over each iteration's global batch."""
    torch.manual_seed(100)
    model = Net()
    if separate:
        optim_wrapper = {n: OptimWrapper(torch.optim.SGD(getattr(model, n).parameters(), lr=LR,
                                                         momentum=0.9)) for n in ("gen", "head")}
        for it in range(ITERS):
            model.train_step(global_batch(it, world), optim_wrapper)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
        for it in range(ITERS):
            model(**global_batch(it, world), mode="loss")["loss"].backward()
            optimizer.step()
            optimizer.zero_grad()
    return {n: p.detach() for n, p in model.named_parameters()}


def compare(wrapper, got, want) -> None:
    name = wrapper.__name__
    check(set(got) == set(want), f"{name}: parameter names {sorted(got)}")
    for n in want:
        if n not in got:
            continue
        diff = ((got[n] - want[n]).abs().max() / want[n].abs().max().clamp_min(1e-12)).item()
        check(diff <= TOLERANCE, f"{name}: {n} differs from one-process training by {diff:.2e}")
    everyone = dist.all_gather_object({n: p.tolist() for n, p in got.items()})
    check(all(e == everyone[0] for e in everyone), f"{name}: parameters differ across ranks")


# -- is_model_wrapper through the registry ------------------------------------------------


def registry_checks() -> None:
    model = Net()

    @MODEL_WRAPPERS.register_module()
    class UserWrapper(nn.Module):  # a user's wrapper, registered as mmengine's docs say
        def __init__(self, module):
            super().__init__()
            self.module = module

    class Unregistered(nn.Module):
        def __init__(self, module):
            super().__init__()
            self.module = module

    child = Registry("model_wrapper", parent=MODEL_WRAPPERS, scope="user_scope")

    @child.register_module()
    class ChildWrapper(nn.Module):
        def __init__(self, module):
            super().__init__()
            self.module = module

    wrapped = UserWrapper(model)
    check(is_model_wrapper(wrapped) and wrap_model(wrapped) is wrapped,
          "a wrapper registered in MODEL_WRAPPERS passes through wrap_model untouched")
    check(unwrap(wrapped) is model, "unwrapping a registered wrapper through .module")
    check(not is_model_wrapper(model) and not is_model_wrapper(Unregistered(model)),
          "a model or an unregistered class is not a wrapper")
    check(isinstance(wrap_model(Unregistered(model)), MMDistributedDataParallel),
          "an unregistered wrapper is wrapped again")
    check(is_model_wrapper(ChildWrapper(model)) and is_model_wrapper(ChildWrapper(model), child),
          "a wrapper registered in a child registry counts")
    check(is_model_wrapper(nn.DataParallel(model)) and
          not is_model_wrapper(nn.DataParallel(model), child),
          "torch's DataParallel counts for MODEL_WRAPPERS, not for a child registry (parents "
          "are never searched)")
    check(MODEL_WRAPPERS.get("distkit.MMDistributedDataParallel") is MMDistributedDataParallel
          and MODEL_WRAPPERS.get("distkit.MMSeparateDistributedDataParallel")
          is MMSeparateDistributedDataParallel, "distkit's wrappers by config type")


def main():
    dist.init_dist("pytorch", backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    registry_checks()
    path = os.path.join(os.environ["TEST_TMPDIR"], "checkpoint.pth")
    for wrapper in (MMDistributedDataParallel, MMSeparateDistributedDataParallel):
        got = run(wrapper, path)
        compare(wrapper, got, reference(wrapper is MMSeparateDistributedDataParallel, world))
        dist.barrier()  # rank 0 overwrites the checkpoint next
    status = finish(f"mmengine Runner-style DDP at world size {world}")
    dist.destroy()
    return status


if __name__ == "__main__":
    sys.exit(main())
