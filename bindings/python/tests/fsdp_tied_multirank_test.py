"""distkit.fsdp with shared parameters: a small language model whose
embedding and output projection are one nn.Parameter (tied weights), whose
block ties two of its own Linears and is registered under two names and run
twice. Trained 3 SGD steps (momentum) under every sharding strategy, with
and without use_orig_params and auto-wrapping, it must equal the plain model
trained alone on the global batch (relative difference per tensor <= 1e-5)
on every rank, and the ranks must hold the same values; state_dict() has the
plain model's keys (both names of a tied parameter) and values, and full and
sharded state dicts load back. load_state_dict(strict=False) returns the
missing and unexpected keys as torch's does; strict=True names them."""
import copy
import io
import shutil
import sys
import tempfile

import torch
import torch.utils.checkpoint
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

from distkit import dist
from distkit.fsdp import (FullyShardedDataParallel, ModuleWrapPolicy, ShardingStrategy,
                          StateDictType)
from testing.python.hybrid_groups import hybrid_groups
from testing.python.rank_check import check, finish

LOCAL, STEPS, LR, VOCAB, WIDTH = 3, 3, 0.2, 11, 8


class Block(nn.Module):
    """Two Linears sharing one weight (tied inside the block)."""

    def __init__(self, d):
        super().__init__()
        self.inp = nn.Linear(d, d)
        self.out = nn.Linear(d, d)
        self.out.weight = self.inp.weight

    def forward(self, x):
        return x + self.out(torch.tanh(self.inp(x)))


class TiedLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.block = Block(WIDTH)
        self.again = self.block  # one module under two names: keys block.* and again.*
        self.norm = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB)
        self.head.weight = self.embed.weight  # tied input embedding / output projection
        self.register_buffer("calls", torch.zeros(1))

    def forward(self, tokens):
        h = self.block(self.embed(tokens))
        h = self.again(h)  # the block used twice
        return self.head(self.norm(h))


TIED = {"head.weight": "embed.weight", "block.out.weight": "block.inp.weight",
        "again.out.weight": "block.inp.weight"}


def batch(step, first, count):
    g = torch.Generator().manual_seed(700 + step)
    t = torch.randint(0, VOCAB, (64, 5), generator=g)
    return t[first:first + count], torch.roll(t, -1, dims=1)[first:first + count]


def train_beside(sharded, opt, reference, ref_opt, steps):
    """`steps` steps of the sharded model on this rank's part of each batch
    and of the reference on the whole global batch."""
    rank, n = dist.get_rank(), dist.get_world_size()
    for step in range(steps):
        x, y = batch(step, rank * LOCAL, LOCAL)
        loss_of(sharded, x, y).backward()
        opt.step()
        opt.zero_grad()
        x, y = batch(step, 0, n * LOCAL)
        loss_of(reference, x, y).backward()
        ref_opt.step()
        ref_opt.zero_grad()


def loss_of(model, x, y):
    return nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())


def relative(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


def same_state(got, want, what, tolerance=0.0, ordered=True):
    keys, wanted = (list(got), list(want)) if ordered else (sorted(got), sorted(want))
    check(keys == wanted, f"{what}: keys {keys}, want {wanted}")
    worst = max((relative(got[k], want[k]) for k in want if k in got and k != "calls"),
                default=0.0)
    check(worst <= tolerance, f"{what}: values differ by {worst:.2e}")
    return worst


def train(strategy, policy, orig_params):
    rank = dist.get_rank()
    what = f"{strategy.name} policy={policy is not None} use_orig_params={orig_params}"
    hybrid = strategy in (ShardingStrategy.HYBRID_SHARD, ShardingStrategy._HYBRID_SHARD_ZERO2)
    groups = hybrid_groups() if hybrid else None
    torch.manual_seed(0)
    reference = TiedLM()
    check(reference.head.weight is reference.embed.weight, "the reference is tied")
    torch.manual_seed(0 if rank == 0 else 10 + rank)  # sync_module_states: rank 0's values
    sharded = FullyShardedDataParallel(TiedLM(), process_group=groups, sharding_strategy=strategy,
                                       auto_wrap_policy=policy, sync_module_states=True,
                                       use_orig_params=orig_params)
    # The block is a unit (run twice); the embedding's only parameter is
    # tied to the root's head, so the root holds it and no embedding unit
    # is made.
    units = [(u.path, u.keys) for u in sharded._units]
    check([path for path, _ in units] == (["block", ""] if policy else [""]) and
          "embed.weight" in units[-1][1], f"{what}: units {units}")
    opt = torch.optim.SGD(sharded.parameters(), lr=LR, momentum=0.9)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=LR, momentum=0.9)
    initial = copy.deepcopy(reference.state_dict())
    train_beside(sharded, opt, reference, ref_opt, STEPS)
    want = reference.state_dict()
    check(relative(want["embed.weight"], initial["embed.weight"]) > 1e-3, f"{what}: trained")
    full = sharded.state_dict()
    worst = same_state(full, want, f"{what}: state_dict", 1e-5)
    for alias, primary in TIED.items():
        check(alias in full and torch.equal(full[alias], full[primary]),
              f"{what}: {alias} equals {primary}")
    # Every rank holds the same model.
    everyone = dist.all_gather_object({k: v for k, v in full.items()})
    check(all(torch.equal(other[k], full[k]) for other in everyone for k in full),
          f"{what}: ranks differ")
    x, _ = batch(99, 0, 4)
    with torch.no_grad():
        check(torch.allclose(sharded(x), reference(x), rtol=1e-5, atol=1e-6), f"{what}: outputs")
    if rank == 0:
        print(f"{what}: worst relative difference {worst:.2e}", flush=True)
    if strategy == ShardingStrategy.FULL_SHARD:
        osd = FullyShardedDataParallel.optim_state_dict(sharded, opt)
        ref_names = {name: p for name, p in reference.named_parameters()}
        check(sorted(osd["state"]) == sorted(ref_names),
              f"{what}: optim keys {sorted(osd['state'])}")
        momentum = max(relative(osd["state"][k]["momentum_buffer"],
                                ref_opt.state[p]["momentum_buffer"])
                       for k, p in ref_names.items() if k in osd["state"])
        check(momentum <= 1e-5, f"{what}: momentum differs by {momentum:.2e}")
    round_trips(sharded, want, what, policy, orig_params, groups)


def round_trips(sharded, want, what, policy, orig_params, groups):
    """Full: a changed dict loads (also through torch.save) and comes back.
    Sharded: this rank's dict loads back, and the checkpoint files load into
    a fresh model of other values."""
    changed = {k: v + 1 if v.is_floating_point() else v for k, v in want.items()}
    for alias, primary in TIED.items():
        changed[alias] = changed[primary]  # one tensor under both names, as torch saves it
    buffer = io.BytesIO()
    torch.save(changed, buffer)
    buffer.seek(0)
    result = sharded.load_state_dict(torch.load(buffer))
    check(list(result.missing_keys) == [] and list(result.unexpected_keys) == [],
          f"{what}: load_state_dict returned {result}")
    same_state(sharded.state_dict(), changed, f"{what}: full round trip")
    if orig_params is False and dist.get_world_size() == 1:
        # The wrapped module's own (local) state dict: at one rank the plain
        # keys (the units' entries last).
        same_state(sharded.module.state_dict(), changed, f"{what}: module.state_dict()",
                   ordered=False)
    with FullyShardedDataParallel.state_dict_type(sharded, StateDictType.SHARDED_STATE_DICT):
        mine = sharded.state_dict()
        sharded.load_state_dict(mine)
    same_state(sharded.state_dict(), changed, f"{what}: sharded round trip")
    directory = dist.all_gather_object(tempfile.mkdtemp() if dist.get_rank() == 0 else None)[0]
    sharded.save_sharded_checkpoint(directory)
    torch.manual_seed(55)
    fresh = FullyShardedDataParallel(TiedLM(), process_group=groups,
                                     sharding_strategy=sharded.sharding_strategy,
                                     auto_wrap_policy=policy, use_orig_params=orig_params)
    fresh.load_sharded_checkpoint(directory)
    same_state(fresh.state_dict(), changed, f"{what}: sharded checkpoint loads")
    dist.barrier()
    if dist.get_rank() == 0:
        shutil.rmtree(directory)


def strict_false():
    """torch's load_state_dict(strict=False): a missing key keeps its value
    and an unexpected one is ignored, both returned; strict=True raises
    naming them. A tied parameter loads from either of its names."""
    torch.manual_seed(0)
    reference = TiedLM()
    sharded = FullyShardedDataParallel(TiedLM(), auto_wrap_policy=ModuleWrapPolicy({Block}),
                                       sync_module_states=True)
    before = sharded.state_dict()
    given = {k: v + 1 if v.is_floating_point() else v for k, v in reference.state_dict().items()}
    del given["head.bias"], given["head.weight"]
    given["extra.weight"] = torch.zeros(2)
    try:
        sharded.load_state_dict(given)
        check(False, "strict=True accepted a missing and an unexpected key")
    except RuntimeError as e:
        check("head.bias" in str(e) and "head.weight" in str(e) and "extra.weight" in str(e),
              f"strict=True error names the keys: {e}")
        try:
            TiedLM().load_state_dict(given)
        except RuntimeError as torch_error:  # torch's text, trailing spaces too
            want = str(torch_error).replace("TiedLM", "FullyShardedDataParallel")
            check(str(e) == want, f"strict=True error {str(e)!r}, torch's {want!r}")
    same_state(sharded.state_dict(), before, "strict=True loads nothing")
    result = sharded.load_state_dict(given, strict=False)
    check(result.missing_keys == ["head.weight", "head.bias"],
          f"missing_keys {result.missing_keys}")
    check(result.unexpected_keys == ["extra.weight"], f"unexpected_keys {result.unexpected_keys}")
    plain = TiedLM()  # what torch's own load does
    plain_result = plain.load_state_dict(given, strict=False)
    check(sorted(plain_result.missing_keys) == sorted(result.missing_keys) and
          plain_result.unexpected_keys == result.unexpected_keys,
          f"torch's keys {plain_result}, ours {result}")
    got = sharded.state_dict()
    want = dict(given, **{"head.bias": before["head.bias"]})
    want["head.weight"] = want["embed.weight"]  # tied: loaded under its other name
    want.pop("extra.weight")
    same_state(got, {k: want[k] for k in got}, "strict=False loads the rest")
    check(torch.equal(got["head.bias"], before["head.bias"]), "a missing key keeps its value")
    if dist.get_rank() == 0:
        print(f"strict=False: {result}", flush=True)


def train_alike(make, what, strategy=ShardingStrategy.FULL_SHARD, policy=None, steps=STEPS,
                width=WIDTH, tolerance=1e-5):
    """`make()` wrapped and trained on each rank's part of the batch equals
    make() trained alone on the whole batch (SGD with momentum), on every
    rank; returns the wrapped model."""
    rank, n = dist.get_rank(), dist.get_world_size()
    hybrid = strategy in (ShardingStrategy.HYBRID_SHARD, ShardingStrategy._HYBRID_SHARD_ZERO2)
    torch.manual_seed(0)
    reference = make()
    torch.manual_seed(0)
    sharded = FullyShardedDataParallel(make(), process_group=hybrid_groups() if hybrid else None,
                                       sharding_strategy=strategy, auto_wrap_policy=policy)
    opt = torch.optim.SGD(sharded.parameters(), lr=LR, momentum=0.9)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=LR, momentum=0.9)
    for step in range(steps):
        g = torch.Generator().manual_seed(900 + step)
        x = torch.randn(n * LOCAL, width, generator=g)
        sharded(x[rank * LOCAL:(rank + 1) * LOCAL]).square().mean().backward()
        opt.step()
        opt.zero_grad()
        reference(x).square().mean().backward()
        ref_opt.step()
        ref_opt.zero_grad()
    full = sharded.state_dict()
    same_state(full, reference.state_dict(), f"{what}: trained", tolerance)
    everyone = dist.all_gather_object(full)
    check(all(torch.equal(other[k], full[k]) for other in everyone for k in full),
          f"{what}: ranks differ")
    return sharded


def checkpoint_wrapped():
    """A state-dict hook renames the keys (torch's checkpoint_wrapper drops
    "_checkpoint_wrapped_module."): the model builds, trains as the plain
    one and its state_dict has the plain keys."""
    for strategy in (ShardingStrategy.FULL_SHARD, ShardingStrategy.NO_SHARD):
        try:
            train_alike(lambda: nn.Sequential(checkpoint_wrapper(nn.Linear(4, 4)),
                                              nn.Linear(4, 2)),
                        f"checkpoint_wrapper {strategy.name}", strategy, width=4)
        except KeyError as e:
            check(False, f"checkpoint_wrapper {strategy.name}: KeyError {e}")


def rank0_loads():
    """load_state_dict(strict=False) with a full dict on rank 0 and {} on the
    others (FullStateDictConfig(rank0_only=True)'s): every rank ends with
    rank 0's values and trains on identically."""
    rank = dist.get_rank()
    torch.manual_seed(0)
    reference = TiedLM()
    torch.manual_seed(1)
    sharded = FullyShardedDataParallel(TiedLM(), auto_wrap_policy=ModuleWrapPolicy({Block}),
                                       sync_module_states=True)
    given = reference.state_dict() if rank == 0 else {}
    result = sharded.load_state_dict(given, strict=False)
    check(rank == 0 or len(result.missing_keys) == len(reference.state_dict()),
          f"rank0_only load: missing {result.missing_keys}")
    same_state(sharded.state_dict(), reference.state_dict(), "rank0_only load: values")
    opt = torch.optim.SGD(sharded.parameters(), lr=LR)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=LR)
    train_beside(sharded, opt, reference, ref_opt, 2)
    full = sharded.state_dict()
    same_state(full, reference.state_dict(), "rank0_only load: trained", 1e-5)
    everyone = dist.all_gather_object(full)
    check(all(torch.equal(other[k], full[k]) for other in everyone for k in full),
          "rank0_only load: ranks differ")


class Layer(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.lin = nn.Linear(d, d)

    def forward(self, x):
        return torch.tanh(self.lin(x))


class TiedAcrossCheckpoint(nn.Module):
    """A weight used inside a reentrant-checkpointed block and outside."""

    def __init__(self):
        super().__init__()
        self.pre = nn.Linear(WIDTH, WIDTH)
        self.block = Layer(WIDTH)
        self.post = nn.Linear(WIDTH, WIDTH)
        self.post.weight = self.block.lin.weight

    def forward(self, x):
        h = torch.utils.checkpoint.checkpoint(self.block, self.pre(x))
        return self.post(h)


class Albert(nn.Module):
    """One block run 3 times, each under reentrant checkpoint."""

    def __init__(self):
        super().__init__()
        self.pre = nn.Linear(WIDTH, WIDTH)
        self.block = Layer(WIDTH)
        self.head = nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        h = self.pre(x)
        for _ in range(3):
            h = torch.utils.checkpoint.checkpoint(self.block, h)
        return self.head(h)


def checkpointed():
    """Gradients reaching a leaf in several backward passes (reentrant
    checkpoint's inner ones and the outer one): reduced once all arrived."""
    for make in (TiedAcrossCheckpoint, Albert):
        for strategy in ShardingStrategy:
            for policy in (None, ModuleWrapPolicy({Layer})):
                what = f"{make.__name__} {strategy.name} policy={policy is not None}"
                try:
                    train_alike(make, what, strategy, policy)
                except RuntimeError as e:
                    check(False, f"{what}: {e}")


def main():
    dist.init_dist("pytorch", backend="gloo")
    for strategy in ShardingStrategy:
        for policy in (None, ModuleWrapPolicy({Block, nn.Embedding})):
            for orig_params in (False, True):
                train(strategy, policy, orig_params)
    strict_false()
    checkpoint_wrapped()
    rank0_loads()
    checkpointed()
    dist.barrier()
    status = finish("fsdp tied checks")
    dist.destroy()
    return status


if __name__ == "__main__":
    sys.exit(main())
