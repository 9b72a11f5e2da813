"""distkit.fsdp in a real job: a small network with repeated blocks (one unit
per block by auto-wrap policy, the root for the rest) trained 5 SGD steps
under FULL_SHARD, SHARD_GRAD_OP and NO_SHARD, also with no_sync
accumulation, must equal the same network trained alone on the concatenated
global batch (relative difference per tensor <= 1e-5); the full state dict
has the original keys and loads back."""
import copy
import sys

import torch
from torch import nn

from distkit import dist
from distkit.fsdp import (FullyShardedDataParallel, ModuleWrapPolicy, ShardingStrategy,
                          size_based_auto_wrap_policy)

LOCAL, STEPS, LR = 3, 5, 0.1
failures = 0


def check(ok, what):
    global failures
    if not ok:
        failures += 1
        print(f"rank {dist.get_rank()}: CHECK FAILED: {what}", file=sys.stderr, flush=True)


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.linear = nn.Linear(width, width)
        self.scale = nn.Parameter(torch.ones(width, dtype=torch.float64))

    def forward(self, x):
        return torch.tanh(self.linear(x)) * self.scale.float() + x


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(5, 9)
        self.blocks = nn.Sequential(Block(9), Block(9))
        self.head = nn.Linear(9, 3)
        self.register_buffer("calls", torch.zeros(1))

    def forward(self, x):
        return self.head(self.blocks(self.embed(x)))


def batch(step, first, count):
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(64, 5, generator=g)
    y = torch.randn(64, 3, generator=g)
    return x[first:first + count], y[first:first + count]


def relative(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


def train(strategy, accumulate, policy):
    rank, n = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    reference = Net()
    initial = copy.deepcopy(reference.state_dict())
    torch.manual_seed(rank)  # every rank starts different: sync_module_states
    model = Net()
    sharded = FullyShardedDataParallel(model, sharding_strategy=strategy,
                                       auto_wrap_policy=policy, sync_module_states=True)
    check(len(sharded._units) == (3 if policy is not None else 1), f"{strategy}: units")
    opt = torch.optim.SGD(sharded.parameters(), lr=LR)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=LR)
    for step in range(STEPS):
        for micro in range(accumulate):
            x, y = batch(step * accumulate + micro, rank * LOCAL, LOCAL)
            context = sharded.no_sync() if micro < accumulate - 1 else _nothing()
            with context:
                loss = ((sharded(x) - y) ** 2).mean()
                loss.backward()
        opt.step()
        opt.zero_grad()
        for micro in range(accumulate):
            x, y = batch(step * accumulate + micro, 0, n * LOCAL)
            ((reference(x) - y) ** 2).mean().backward()
        ref_opt.step()
        ref_opt.zero_grad()
        if strategy != ShardingStrategy.NO_SHARD:  # memory: only shards stay
            check(all(t.storage().size() == 0 for u in sharded._units for t in u.full),
                  f"{strategy}: full parameters freed after backward")
    full = sharded.state_dict()
    want = reference.state_dict()
    check(list(full.keys()) == list(want.keys()), f"{strategy}: state dict keys {list(full)}")
    worst = max(relative(full[k], want[k]) for k in want if want[k].is_floating_point()
                and k != "calls")
    check(worst <= 1e-5, f"{strategy} x{accumulate}: differs from training alone by {worst:.2e}")
    check(relative(want["head.weight"], initial["head.weight"]) > 1e-3, "training moved")
    if rank == 0:
        print(f"{strategy.name:14} accumulate {accumulate}: worst relative difference "
              f"{worst:.2e}", flush=True)
    # The same outputs as the reference, and the full state dict loads back.
    x, _ = batch(99, 0, 4)
    with torch.no_grad():
        check(torch.allclose(sharded(x), reference(x), rtol=1e-5, atol=1e-6), "outputs")
    changed = {k: v + 1 if v.is_floating_point() else v for k, v in want.items()}
    sharded.load_state_dict(changed)
    back = sharded.state_dict()
    check(all(torch.equal(back[k], changed[k]) for k in changed), "load_state_dict round trip")


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def main():
    dist.init_dist("pytorch", backend="gloo")
    policy = ModuleWrapPolicy({Block})
    for strategy in (ShardingStrategy.FULL_SHARD, ShardingStrategy.SHARD_GRAD_OP,
                     ShardingStrategy.NO_SHARD):
        train(strategy, 1, policy)
        train(strategy, 2, policy)
    train(ShardingStrategy.FULL_SHARD, 1, None)
    check(size_based_auto_wrap_policy(nn.Linear(2, 2), False, 100, min_num_params=50),
          "size policy")
    dist.barrier()
    print(f"rank {dist.get_rank()}: fsdp checks {'passed' if failures == 0 else 'FAILED'}",
          flush=True)
    dist.destroy()
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
