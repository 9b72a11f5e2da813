"""The order of distkit.fsdp's collectives, the same on every rank and as
C++'s:

- fully_shard on a module above several earlier fully_shard calls: one
  coordinator reduces every unit at the end of backward, also a unit this
  rank's backward did not reach (the loss of rank 0 leaves a layer out, the
  other ranks' use it last). Before, each call's coordinator reduced its own
  unreached units only where the rank's backward reached one of them: rank
  0 never reduced the layer, and its next collective met the others'
  reduce_scatter. The gradients are checked against the mean of every
  rank's loss's gradient on the plain model, computed here.
- sync_module_states: the units first, then the parameters no unit holds
  (an ignored module's) and the buffers, in module order, as C++'s
  FullyShardedDataParallel::Build does. The last rank plays a LibTorch
  rank of the same job: it makes the unit through the C ABI
  (dk_shard_create, what FlatShard::Create is) and then broadcasts what
  C++ broadcasts, in C++'s order; every rank ends with rank 0's ignored
  parameters and buffers. (Python broadcast the buffers first: the two
  ranks' collectives disagreed.)
- construction with a policy, ignored modules and a wrap set given as
  Python sets, each rank with a hash seed of its own (the program starts
  itself again with PYTHONHASHSEED=<1000 + rank>: the ranks the zygote
  forks share its seed): every rank builds the same units, holding the
  same parameters in the same order.
A collective that hangs fails the program after 60 s, with every thread's
traceback (faulthandler)."""
import ctypes
import faulthandler
import os
import sys

import torch
from torch import nn

from distkit import _lib, dist
from distkit._dlpack import Borrowed
from distkit._lib import lib, raise_for_status
from distkit.fsdp import (FullyShardedDataParallel, ModuleWrapPolicy, ShardingStrategy,
                          fully_shard)
from distkit.fsdp.options import shard_config
from testing.python.rank_check import check, finish


# ---- fully_shard: a unit one rank's backward does not reach -------------------

class Branches(nn.Module):
    """`side`'s output counts in the loss of every rank but 0, and its
    gradient comes last (it runs first in forward)."""

    def __init__(self):
        super().__init__()
        self.side = nn.Linear(4, 3)
        self.body = nn.Linear(4, 4)
        self.head = nn.Linear(4, 2)

    def forward(self, x, uses_side):
        side = self.side(x)
        out = self.head(torch.tanh(self.body(x))).pow(2).sum()
        return out + side.pow(2).sum() if uses_side else out


def unreached_unit(rank, n):
    what = "fully_shard: a unit rank 0's backward does not reach"
    lr, steps = 0.1, 3
    torch.manual_seed(7)
    reference = Branches()
    model = Branches()
    model.load_state_dict(reference.state_dict())
    fully_shard(model.body)
    fully_shard(model.side, reshard_after_forward=False)  # no gather in backward
    fully_shard(model)  # head: the root's unit
    coordinator = model._dk_fsdp
    check(model.body._dk_fsdp is coordinator and model.side._dk_fsdp is coordinator,
          f"{what}: one coordinator for the model")
    check([u.module for u in coordinator.units] == [model.side, model.body, model],
          f"{what}: the units in module order, the root last")
    flats = [p for p in model.parameters()]
    optimizer = torch.optim.SGD(flats, lr=lr)
    ref_optimizer = torch.optim.SGD(reference.parameters(), lr=lr)
    x = torch.randn(5, 4, generator=torch.Generator().manual_seed(11))
    for step in range(steps):
        optimizer.zero_grad()
        model(x, rank != 0).backward()
        optimizer.step()
        # The reference: the mean over every rank of its loss's gradient.
        ref_optimizer.zero_grad()
        for r in range(n):
            (reference(x, r != 0) / n).backward()
        ref_optimizer.step()
    full = {}
    for unit in coordinator.units:
        full.update(zip(_keys(model, unit), unit.gather_full()))
    for key, value in reference.state_dict().items():
        check(key in full and torch.allclose(full[key], value, rtol=1e-5, atol=1e-6),
              f"{what}: {key} after {steps} steps equals the reference")
    t = torch.ones(1)
    dist.all_reduce(t)
    check(t.item() == n, f"{what}: the ranks' collectives agree afterwards")


def _keys(model, unit):
    """The state-dict keys of `unit`'s parameters in `model`."""
    paths = {id(m): name for name, m in model.named_modules()}
    return [f"{paths[id(owner)]}.{name}" if paths[id(owner)] else name
            for owner, name, _ in unit.owned]


# ---- sync_module_states in C++'s order ---------------------------------------

class Stateful(nn.Module):
    def __init__(self, seed):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.lin = nn.Linear(5, 4)
        self.norm = nn.BatchNorm1d(4)
        self.aside = nn.Linear(3, 2)  # ignored: whole on every rank
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g))
            self.norm.running_mean.copy_(torch.randn(4, generator=g))
            self.norm.running_var.copy_(torch.rand(4, generator=g) + 0.5)
            self.norm.num_batches_tracked.fill_(seed)
        self.register_buffer("scale", torch.randn(6, generator=g))


def cpp_order(rank, n):
    what = "sync_module_states in C++'s order"
    seed = 300 + rank  # every rank starts different
    model = Stateful(seed)
    expected = Stateful(300)  # rank 0's
    if rank == n - 1:
        # A LibTorch rank: FlatShard::Create over the parameters its
        # root unit takes (named_parameters order, the ignored module's
        # left out), then BroadcastFromRank0 of the parameters no unit
        # holds and of the buffers, in module order.
        params = [p for name, p in model.named_parameters() if not name.startswith("aside.")]
        names = [name for name, _ in model.named_parameters()
                 if not name.startswith("aside.")]
        views = [Borrowed(p.detach().contiguous()) for p in params]
        pointers = _lib.tensor_array(views)
        c_names = (ctypes.c_char_p * len(names))(*[s.encode() for s in names])
        config = shard_config(ShardingStrategy.FULL_SHARD, None, None, False, True, None)
        handle = ctypes.c_void_p()
        raise_for_status(lib.dk_shard_create, dist.groups.handle_of(None), pointers,
                         len(views), c_names, ctypes.byref(config), ctypes.byref(handle))
        for t in list(model.aside.parameters()) + list(model.buffers()):
            dist.broadcast(t.data, 0)
        lib.dk_shard_destroy(handle)
    else:
        model = FullyShardedDataParallel(model, sync_module_states=True,
                                         ignored_modules=[model.aside])
    t = torch.ones(1)
    dist.all_reduce(t)
    check(t.item() == n, f"{what}: the ranks' collectives agree")
    inner = model.module if isinstance(model, FullyShardedDataParallel) else model
    for name, b in expected.named_buffers():
        check(torch.equal(dict(inner.named_buffers())[name], b), f"{what}: rank 0's {name}")
    for name, p in expected.aside.named_parameters():
        check(torch.equal(dict(inner.aside.named_parameters())[name].detach(), p.detach()),
              f"{what}: rank 0's ignored aside.{name}")


# ---- construction under each rank's own hash seed ------------------------------

class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.inner = nn.Linear(width, width)
        self.gate = nn.Linear(width, width)


class Tower(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Block(3 + i) for i in range(4))
        self.skip_a = nn.Linear(2, 2)
        self.skip_b = nn.Linear(2, 3)
        self.out = nn.Linear(6, 1)


def own_hash_seed():
    """Runs the program again with a hash seed of this rank's own."""
    want = str(1000 + int(os.environ.get("RANK", "0")))
    if os.environ.get("PYTHONHASHSEED") != want:
        env = dict(os.environ, PYTHONHASHSEED=want)
        env.pop("DISTKIT_RANK_ZYGOTE", None)  # a process of its own, not a fork
        os.execve(sys.executable, [sys.executable] + sys.argv, env)


def construction(rank, n):
    what = "construction under each rank's hash seed"
    torch.manual_seed(5)
    model = Tower()
    ignored = {model.skip_a, model.skip_b}  # sets, iterated in hash order
    layers = {Block, nn.Linear}
    wrapped = FullyShardedDataParallel(
        model, auto_wrap_policy=ModuleWrapPolicy(layers), ignored_modules=ignored,
        sync_module_states=True)
    mine = [(u.path, list(u.param_names)) for u in wrapped._units]
    everyone = [None] * n
    dist.all_gather_object(everyone, mine)
    seeds = [None] * n
    dist.all_gather_object(seeds, os.environ.get("PYTHONHASHSEED"))
    check(seeds == [str(1000 + r) for r in range(n)], f"{what}: each rank's own seed {seeds}")
    check(all(u == everyone[0] for u in everyone), f"{what}: the same units on every rank")
    expected = ([(f"blocks.{i}.{m}", ["weight", "bias"]) for i in range(4)
                 for m in ("inner", "gate")] + [("out", ["weight", "bias"])])
    check([(path, [name.rsplit(".", 1)[1] for name in names]) for path, names in mine] ==
          expected, f"{what}: the units in module order, children first: {mine}")


def main():
    own_hash_seed()
    faulthandler.dump_traceback_later(60, exit=True)  # a hung collective
    dist.init_dist("pytorch", backend="gloo", timeout=60)
    rank, n = dist.get_rank(), dist.get_world_size()
    construction(rank, n)
    unreached_unit(rank, n)
    if n > 1:
        cpp_order(rank, n)
    faulthandler.cancel_dump_traceback_later()
    return finish("fsdp order checks")


if __name__ == "__main__":
    sys.exit(main())
