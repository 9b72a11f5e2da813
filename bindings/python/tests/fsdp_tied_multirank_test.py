"""distkit.fsdp with shared parameters: a small language model whose
embedding and output projection are one nn.Parameter (tied weights), whose
block ties two of its own Linears and is registered under two names and run
twice. Trained 3 SGD steps (momentum) under every sharding strategy, with
and without use_orig_params and auto-wrapping, it must equal the plain model
trained alone on the global batch (relative difference per tensor <= 1e-5)
on every rank, and the ranks must hold the same values; state_dict() has the
plain model's keys (both names of a tied parameter) and values, and full and
sharded state dicts load back. load_state_dict(strict=False) returns the
missing and unexpected keys as torch's does; strict=True names them.
fully_shard called separately on the two users of a tied weight (or on one
of them, then the root) trains as the plain model; a weight tied between
two units is held by their innermost common unit; under HYBRID_SHARD a
rank-0-only full state dict is rank 0's alone and loads into every
replica (world size 4: 2 replicas of 2 ranks), and two HYBRID_SHARD models
on disjoint halves of the world each load their own holder's dict. A
unit's full parameters used by nested forwards (an alias module around or
inside the owning unit's), non-reentrant activation checkpointing, one
module object under two parents (T5's embed_tokens) and an alias module
given inputs in another dtype than its unit's param_dtype all train as the
plain model."""
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
from distkit.fsdp import (FullStateDictConfig, FullyShardedDataParallel, MixedPrecisionPolicy,
                          ModuleWrapPolicy, ShardingStrategy, StateDictType, fully_shard)
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


class TiedPair(nn.Module):
    """An embedding tied to the output projection, a layer between them."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.mid = nn.Linear(WIDTH, WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB)
        self.head.weight = self.embed.weight

    def forward(self, tokens):
        return self.head(torch.tanh(self.mid(self.embed(tokens))))


def separate_calls():
    """fully_shard called on the two users of a tied weight separately (and
    on one of them only), then on the root: trains as the plain model alone
    on the global batch, on every rank, and the optimizer steps the tied
    weight once (no full copy of it left among parameters())."""
    for layout in (("embed", "head"), ("head", "embed"), ("embed",), ("head",),
                   ("embed", "mid", "head")):
        for reshard in (True, False):
            what = f"fully_shard {'+'.join(layout)}+root reshard={reshard}"

            def shard(model, layout=layout, reshard=reshard, what=what):
                for name in layout:
                    fully_shard(getattr(model, name), reshard_after_forward=reshard)
                fully_shard(model, reshard_after_forward=reshard)
                full_size = [p for p in model.parameters() if p.shape == (VOCAB, WIDTH)]
                check(not full_size, f"{what}: a full copy of the tied weight among "
                      f"parameters(): {[tuple(p.shape) for p in full_size]}")

            train_composable(TiedPair, shard, what)


def hybrid_rank0_only():
    """HYBRID_SHARD (2 replicas of 2 ranks at world size 4) with rank-0-only
    full state dicts: load_state_dict(strict=False) of rank 0's dict ({} on
    every other rank) gives every rank of every replica rank 0's values,
    which then train as the plain model alone; state_dict() under
    FullStateDictConfig(rank0_only=True) is the full dict on rank 0 and {}
    on every other rank. Only world size 4 is HYBRID in earnest: at world
    size 2 and 3 hybrid_groups() makes one node, so the replicate groups
    have one rank each (the load is then the shard group's alone);
    hybrid_halves covers replicate groups without global rank 0."""
    rank = dist.get_rank()
    for offload in (False, True):
        what = f"HYBRID_SHARD rank0_only offload_to_cpu={offload}"
        torch.manual_seed(0)
        reference = TiedLM()
        torch.manual_seed(1 + rank)  # every rank other values before the load
        sharded = FullyShardedDataParallel(TiedLM(), process_group=hybrid_groups(),
                                           sharding_strategy=ShardingStrategy.HYBRID_SHARD,
                                           auto_wrap_policy=ModuleWrapPolicy({Block}))
        try:
            sharded.load_state_dict(reference.state_dict() if rank == 0 else {}, strict=False)
        except RuntimeError as e:
            check(False, f"{what}: load: {e}")
            continue
        same_state(sharded.state_dict(), reference.state_dict(), f"{what}: loaded")
        opt = torch.optim.SGD(sharded.parameters(), lr=LR, momentum=0.9)
        ref_opt = torch.optim.SGD(reference.parameters(), lr=LR, momentum=0.9)
        train_beside(sharded, opt, reference, ref_opt, 2)
        config = FullStateDictConfig(rank0_only=True, offload_to_cpu=offload)
        with FullyShardedDataParallel.state_dict_type(sharded, StateDictType.FULL_STATE_DICT,
                                                      config):
            mine = sharded.state_dict()
        if rank == 0:
            worst = same_state(mine, reference.state_dict(), f"{what}: rank 0's dict", 1e-5)
            print(f"{what}: worst relative difference {worst:.2e}", flush=True)
        else:
            check(len(mine) == 0, f"{what}: rank {rank} got {len(mine)} entries, want none")
        # The same dict loads back into a fresh model on every replica.
        torch.manual_seed(30 + rank)
        fresh = FullyShardedDataParallel(TiedLM(), process_group=hybrid_groups(),
                                         sharding_strategy=ShardingStrategy.HYBRID_SHARD,
                                         auto_wrap_policy=ModuleWrapPolicy({Block}))
        fresh.load_state_dict(mine, strict=False)
        full = fresh.state_dict()
        same_state(full, reference.state_dict(), f"{what}: reloaded", 1e-5)
        everyone = dist.all_gather_object(full)
        check(all(torch.equal(other[k], full[k]) for other in everyone for k in full),
              f"{what}: ranks differ after the reload")


class Body(nn.Module):
    """Two layers tied to each other, a layer between them."""

    def __init__(self):
        super().__init__()
        self.a = Layer(WIDTH)
        self.mid = nn.Linear(WIDTH, WIDTH)
        self.b = Layer(WIDTH)
        self.b.lin.weight = self.a.lin.weight

    def forward(self, x):
        return self.b(self.mid(self.a(x)))


class Deep(nn.Module):
    def __init__(self):
        super().__init__()
        self.pre = nn.Linear(WIDTH, WIDTH)
        self.body = Body()
        self.post = nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        return self.post(self.body(self.pre(x)))


def lowest_common_unit():
    """A weight tied between two units (body.a, body.b) is held by the
    innermost unit enclosing both (body), not the root, and trains as the
    plain model."""
    for strategy in (ShardingStrategy.FULL_SHARD, ShardingStrategy.SHARD_GRAD_OP):
        what = f"lowest common unit {strategy.name}"
        sharded = train_alike(Deep, what, strategy, ModuleWrapPolicy({Layer, Body}))
        units = {u.path: u.keys for u in sharded._units}
        check(units.get("body") == ["body.a.lin.weight", "body.mid.weight", "body.mid.bias"] and
              units.get("body.a") == ["body.a.lin.bias"] and
              units.get("body.b") == ["body.b.lin.bias"], f"{what}: units {units}")


class Enclosing(nn.Module):
    """The tied weight's alias place on the root, used in the root's own
    forward around the embedding's: F.linear(h, self.out_w)."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.mid = nn.Linear(WIDTH, WIDTH)
        self.out_w = self.embed.weight

    def forward(self, tokens):
        h = torch.tanh(self.mid(self.embed(tokens)))
        return nn.functional.linear(h, self.out_w)


class Owner(nn.Module):
    """Calls the module it is given inside its own forward."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(WIDTH, WIDTH)

    def forward(self, x, inner):
        return self.lin(torch.tanh(inner(x)))


class Inside(nn.Module):
    """The alias module (user, tied to owner.lin) called inside the owning
    unit's forward."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.owner = Owner()
        self.user = nn.Linear(WIDTH, WIDTH)
        self.user.weight = self.owner.lin.weight
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, tokens):
        return self.head(self.owner(self.embed(tokens), self.user))


def train_composable(make, shard, what, steps=STEPS):
    """make() sharded by `shard` (fully_shard calls) trains as make() alone
    on the global batch (train_beside), on every rank, output within 1e-5."""
    x_test, _ = batch(97, 0, 6)
    torch.manual_seed(0)
    reference = make()
    with torch.no_grad():
        before = reference(x_test)
    torch.manual_seed(0)
    model = make()
    try:
        shard(model)
        opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
        ref_opt = torch.optim.SGD(reference.parameters(), lr=LR, momentum=0.9)
        train_beside(model, opt, reference, ref_opt, steps)
        with torch.no_grad():
            got, want = model(x_test), reference(x_test)
    except (RuntimeError, ValueError) as e:
        check(False, f"{what}: {e}")
        return
    check(relative(want, before) > 1e-3, f"{what}: trained")
    worst = relative(got, want)
    check(worst <= 1e-5, f"{what}: outputs differ from training alone by {worst:.2e}")
    everyone = dist.all_gather_object(got)
    check(all(torch.equal(other, got) for other in everyone), f"{what}: ranks differ")
    if dist.get_rank() == 0:
        print(f"{what}: outputs' relative difference {worst:.2e}", flush=True)


def nested_users():
    """A unit's full parameters used by nested forwards: the alias module's
    forward around the owning unit's (the root's F.linear(h, self.out_w),
    embed sharded first) and inside it (owner(x, user), user tied to
    owner.lin): the unit is resharded after the outermost, and training
    equals the plain model's."""
    for reshard in (True, False):
        def enclosing(model):
            fully_shard(model.embed, reshard_after_forward=reshard)
            fully_shard(model, reshard_after_forward=reshard)

        def inside(model):
            fully_shard(model.owner, reshard_after_forward=reshard)
            fully_shard(model.user, reshard_after_forward=reshard)
            fully_shard(model, reshard_after_forward=reshard)

        train_composable(Enclosing, enclosing, f"alias around its unit reshard={reshard}")
        train_composable(Inside, inside, f"alias inside its unit reshard={reshard}")


class CheckpointedBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(WIDTH, WIDTH)
        self.b = nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        return x + self.b(torch.tanh(self.a(x)))


class NonReentrant(nn.Module):
    """Each block's forward under non-reentrant activation checkpointing
    (recomputed from saved-tensor hooks during backward)."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.blocks = nn.ModuleList([CheckpointedBlock() for _ in range(2)])
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, tokens):
        h = self.embed(tokens)
        for block in self.blocks:
            h = torch.utils.checkpoint.checkpoint(block, h, use_reentrant=False)
        return self.head(h)


class NonReentrantRegion(NonReentrant):
    """One non-reentrant checkpointed region around both blocks (each its
    own unit): recomputing it at the backward of the second reruns the
    first's forward before backward reaches the first."""

    def forward(self, tokens):
        h = torch.utils.checkpoint.checkpoint(lambda x: self.blocks[1](self.blocks[0](x)),
                                              self.embed(tokens), use_reentrant=False)
        return self.head(h)


def non_reentrant_checkpoint():
    """fully_shard on each block (reshard_after_forward) and the root, the
    blocks checkpointed with use_reentrant=False: the recomputation's
    post-forward during backward leaves the unit gathered for the backward
    that reads it, and training equals the plain model's."""
    def shard(model):
        for block in model.blocks:
            fully_shard(block)
        fully_shard(model)

    train_composable(NonReentrant, shard, "non-reentrant checkpoint")
    train_composable(NonReentrantRegion, shard, "non-reentrant checkpoint of two units")


class Stack(nn.Module):
    def __init__(self, embed_tokens):
        super().__init__()
        self.embed_tokens = embed_tokens
        self.lin = nn.Linear(WIDTH, WIDTH)

    def forward(self, tokens):
        return torch.tanh(self.lin(self.embed_tokens(tokens)))


class Shared(nn.Module):
    """T5 / BART: one embedding module reachable as encoder.embed_tokens and
    decoder.embed_tokens."""

    def __init__(self):
        super().__init__()
        embed = nn.Embedding(VOCAB, WIDTH)
        self.encoder = Stack(embed)
        self.decoder = Stack(embed)
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, tokens):
        return self.head(self.decoder(tokens.flip(1)) + self.encoder(tokens))


def shared_modules():
    """One module object under two parents (the encoder's and the decoder's
    embed_tokens): fully_shard(encoder), then fully_shard(decoder) or the
    root only: the decoder's use gathers the encoder's unit, and training
    equals the plain model's."""
    for with_decoder in (True, False):
        for reshard in (True, False):
            def shard(model):
                fully_shard(model.encoder, reshard_after_forward=reshard)
                if with_decoder:
                    fully_shard(model.decoder, reshard_after_forward=reshard)
                fully_shard(model, reshard_after_forward=reshard)

            train_composable(Shared, shard, f"shared module decoder={with_decoder} "
                             f"reshard={reshard}")


def hybrid_halves():
    """Two HYBRID_SHARD models on disjoint halves of the world (world size
    4: ranks 0-1 and 2-3, shard groups of one rank, replicate groups of
    two): rank 0 and rank 2 each load their own model's dict (strict=False,
    {} on the other ranks), and every rank of each model ends with its
    holder's values, not the other model's."""
    rank = dist.get_rank()
    if dist.get_world_size() != 4:
        return
    shards = [dist.new_group([r]) for r in range(4)]
    halves = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    half = rank // 2
    what = f"HYBRID_SHARD on half {half}"
    torch.manual_seed(40 + half)
    reference = TiedLM()  # this half's dict, other values than the other half's
    torch.manual_seed(60 + rank)
    sharded = FullyShardedDataParallel(TiedLM(), process_group=(shards[rank], halves[half]),
                                       sharding_strategy=ShardingStrategy.HYBRID_SHARD,
                                       auto_wrap_policy=ModuleWrapPolicy({Block}))
    try:
        sharded.load_state_dict(reference.state_dict() if rank % 2 == 0 else {}, strict=False)
    except RuntimeError as e:
        check(False, f"{what}: load: {e}")
        return
    same_state(sharded.state_dict(), reference.state_dict(), f"{what}: loaded")


class LowPrecisionOwner(nn.Module):
    """The embedding's unit computes in float64 (its mp_policy); the head,
    bias-free and tied to it, is an alias module given float32 inputs."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.mid = nn.Linear(WIDTH, WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, tokens):
        h = torch.tanh(self.mid(self.embed(tokens).float()))  # float32 between them
        return self.head(h).float()


def alias_input_cast():
    """The alias module's forward casts its floating-point inputs to the
    owning unit's param_dtype (its mp_policy casts forward inputs), as the
    unit's own module does: training equals the plain float32 model's."""
    policy = MixedPrecisionPolicy(param_dtype=torch.float64)

    def shard(model):
        fully_shard(model.embed, mp_policy=policy)
        fully_shard(model.head)
        fully_shard(model)

    train_composable(LowPrecisionOwner, shard, "alias input cast to the unit's param_dtype")


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
    separate_calls()
    lowest_common_unit()
    hybrid_rank0_only()
    nested_users()
    non_reentrant_checkpoint()
    shared_modules()
    hybrid_halves()
    alias_input_cast()
    dist.barrier()
    status = finish("fsdp tied checks")
    dist.destroy()
    return status


if __name__ == "__main__":
    sys.exit(main())
