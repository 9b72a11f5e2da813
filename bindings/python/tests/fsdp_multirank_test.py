"""distkit.fsdp in a real job: a small network with repeated blocks (one unit
per block by auto-wrap policy, the root for the rest) trained 5 SGD steps
under FULL_SHARD, SHARD_GRAD_OP and NO_SHARD, also with no_sync
accumulation, must equal the same network trained alone on the concatenated
global batch (relative difference per tensor <= 1e-5); the full state dict
has the original keys and loads back."""
import copy
import os
import socket
import sys

import torch
from torch import nn

from distkit import dist
from distkit.model import MMFullyShardedDataParallel, OptimWrapper, is_model_wrapper
from distkit.fsdp import (BackwardPrefetch, CPUOffload, FullyShardedDataParallel, MixedPrecision,
                          ModuleWrapPolicy, ShardingStrategy, StateDictType,
                          fully_shard, prefetch_overlap, size_based_auto_wrap_policy)
from testing.python.hybrid_groups import hybrid_groups
from testing.python.rank_check import check, finish

LOCAL, STEPS, LR = 3, 5, 0.1


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.linear = nn.Linear(width, width)
        self.scale = nn.Parameter(torch.ones(width, dtype=torch.float64))

    def forward(self, x):
        return torch.tanh(self.linear(x)) * self.scale.to(x.dtype) + x


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


def train_bf16():
    """MixedPrecision(param_dtype=bfloat16): the units gather and compute in
    bfloat16 and keep float32 shards. The reference trains in float32 on the
    global batch; bfloat16 keeps 8 significant bits, so forward values carry
    ~2^-9 relative error per rounding; after 5 steps of lr 0.1 the parameters
    stay within 1e-2 of float32 training (measured 0.9e-3 to 2e-3)."""
    rank, n = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    reference = Net()
    torch.manual_seed(rank)
    sharded = FullyShardedDataParallel(
        Net(), auto_wrap_policy=ModuleWrapPolicy({Block}), sync_module_states=True,
        mixed_precision=MixedPrecision(param_dtype=torch.bfloat16))
    check(all(p.dtype == torch.float32 or p.dtype == torch.float64 for p in sharded.parameters()),
          "bf16: float master shards")
    opt = torch.optim.SGD(sharded.parameters(), lr=LR)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=LR)
    for step in range(STEPS):
        x, y = batch(step, rank * LOCAL, LOCAL)
        out = sharded(x)
        check(out.dtype == torch.bfloat16, "bf16: computed in bfloat16")
        ((out.float() - y) ** 2).mean().backward()
        opt.step()
        opt.zero_grad()
        x, y = batch(step, 0, n * LOCAL)
        ((reference(x) - y) ** 2).mean().backward()
        ref_opt.step()
        ref_opt.zero_grad()
    full, want = sharded.state_dict(), reference.state_dict()
    worst = max(relative(full[k], want[k]) for k in want if k != "calls")
    check(worst <= 1e-2, f"bf16: differs from float32 training alone by {worst:.2e}")
    if rank == 0:
        print(f"MixedPrecision bfloat16: worst relative difference {worst:.2e}", flush=True)


def buffer_dtype():
    """MixedPrecision(buffer_dtype=bfloat16): a buffer forward uses lives in
    bfloat16 (forward computes with the rounded value); the full state dict
    gives it in its own dtype, float32, as torch's does. An ignored
    parameter is in the state dict as it is."""

    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(3, 3)
            self.frozen = nn.Linear(3, 3)
            self.register_buffer("scale", torch.tensor([1.0 + 2 ** -10, 3.0, 0.1]))

        def forward(self, x):
            return self.frozen(self.linear(x)) * self.scale

    torch.manual_seed(0)
    module = Scaled()
    want_scale = module.scale.to(torch.bfloat16).to(torch.float32)
    frozen_weight = module.frozen.weight.detach().clone()
    model = FullyShardedDataParallel(
        module, mixed_precision=MixedPrecision(buffer_dtype=torch.bfloat16),
        ignored_parameters=list(module.frozen.parameters()))
    check(module.scale.dtype == torch.bfloat16, f"buffer in bfloat16: {module.scale.dtype}")
    x = torch.ones(2, 3)
    with torch.no_grad():
        out = model(x)
    full = model.state_dict()
    check(full["scale"].dtype == torch.float32 and torch.equal(full["scale"], want_scale),
          f"buffer_dtype: the state dict has the float32 buffer {full['scale']}")
    check(torch.equal(full["frozen.weight"], frozen_weight), "an ignored parameter as it is")
    hidden = nn.functional.linear(x, full["linear.weight"], full["linear.bias"])
    ref = nn.functional.linear(hidden, full["frozen.weight"], full["frozen.bias"])
    check(torch.allclose(out.float(), ref * want_scale, rtol=1e-6, atol=1e-7)
          and not torch.allclose(out.float(), ref * module.scale.new_tensor(
              [1.0 + 2 ** -10, 3.0, 0.1], dtype=torch.float32), rtol=1e-6, atol=1e-7),
          "forward used the bfloat16 buffer")


def train_orig_params():
    """use_orig_params=True: the optimizer gets the original parameters, by
    name (here two parameter groups with different learning rates, and
    Adam, whose moments are then sharded too), each a 1-D view of this
    rank's piece; training equals Adam alone on the global batch."""
    rank, n = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    reference = Net()
    torch.manual_seed(rank)
    sharded = FullyShardedDataParallel(Net(), auto_wrap_policy=ModuleWrapPolicy({Block}),
                                       sync_module_states=True, use_orig_params=True)
    names = [name for name, _ in sharded.named_parameters()]
    check(names == ["module." + name for name, _ in reference.named_parameters()],
          f"use_orig_params: parameter names {names}")
    held = torch.tensor([sum(p.numel() for p in sharded.parameters())])
    dist.all_reduce(held)
    total = sum(p.numel() for p in reference.parameters())
    check(held.item() == total, f"use_orig_params: ranks hold {held.item()} of {total} elements")

    def groups(model, prefix):
        head = [p for name, p in model.named_parameters() if name.startswith(prefix + "head")]
        rest = [p for name, p in model.named_parameters() if not name.startswith(prefix + "head")]
        return [{"params": rest}, {"params": head, "lr": LR / 4}]

    opt = torch.optim.Adam(groups(sharded, "module."), lr=LR / 10)
    ref_opt = torch.optim.Adam(groups(reference, ""), lr=LR / 10)
    for step in range(STEPS):
        x, y = batch(step, rank * LOCAL, LOCAL)
        ((sharded(x) - y) ** 2).mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=step % 2 == 0)
        x, y = batch(step, 0, n * LOCAL)
        ((reference(x) - y) ** 2).mean().backward()
        ref_opt.step()
        ref_opt.zero_grad()
    moments = torch.tensor([sum(s["exp_avg"].numel() for s in opt.state.values())])
    dist.all_reduce(moments)
    check(moments.item() == total, f"use_orig_params: Adam state {moments.item()} of {total}")
    full, want = sharded.state_dict(), reference.state_dict()
    check(list(full) == list(want), f"use_orig_params: state dict keys {list(full)}")
    worst = max(relative(full[k], want[k]) for k in want if k != "calls")
    check(worst <= 1e-5, f"use_orig_params: differs from training alone by {worst:.2e}")
    if rank == 0:
        print(f"use_orig_params (Adam, 2 groups): worst relative difference {worst:.2e}",
              flush=True)


def train_optim_state(orig_params):
    """FSDP.optim_state_dict gathers Adam's sharded moments to full shapes
    under the original names (equal to Adam alone on the global batch), and
    optim_state_dict_to_load gives a fresh sharded model's optimizer its
    parts: training then continues exactly as the reference does."""
    rank, n = dist.get_rank(), dist.get_world_size()
    what = f"optim state (use_orig_params={orig_params})"
    torch.manual_seed(0)
    reference = Net()
    ref_opt = torch.optim.Adam(reference.parameters(), lr=LR / 10)

    def wrap():
        return FullyShardedDataParallel(Net(), auto_wrap_policy=ModuleWrapPolicy({Block}),
                                        sync_module_states=True, use_orig_params=orig_params)

    torch.manual_seed(rank)
    sharded = wrap()
    opt = torch.optim.Adam(sharded.parameters(), lr=LR / 10)

    def step(model, optimizer, s, first, count):
        x, y = batch(s, first, count)
        ((model(x) - y) ** 2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()

    for s in range(3):
        step(sharded, opt, s, rank * LOCAL, LOCAL)
        step(reference, ref_opt, s, 0, n * LOCAL)
    osd = FullyShardedDataParallel.optim_state_dict(sharded, opt)
    want = {name: ref_opt.state[p] for name, p in reference.named_parameters()}
    check(sorted(osd["state"]) == sorted(want), f"{what}: keys {sorted(osd['state'])}")
    worst = 0.0
    for name, ref_state in want.items():
        got = osd["state"].get(name, {})
        check(float(got.get("step", -1)) == float(ref_state["step"]), f"{what}: {name} step")
        for key in ("exp_avg", "exp_avg_sq"):
            if key in got and got[key].shape == ref_state[key].shape:
                worst = max(worst, relative(got[key], ref_state[key]))
            else:
                check(False, f"{what}: {name}.{key} missing or misshaped")
    check(worst <= 1e-5, f"{what}: Adam moments differ from Adam alone by {worst:.2e}")

    torch.manual_seed(100 + rank)  # another start: everything comes from the dicts
    resumed = wrap()
    resumed.load_state_dict(sharded.state_dict())
    resumed_opt = torch.optim.Adam(resumed.parameters(), lr=1.0)  # the dict's lr wins
    resumed_opt.load_state_dict(
        FullyShardedDataParallel.optim_state_dict_to_load(resumed, resumed_opt, osd))
    for s in range(3, 5):
        step(resumed, resumed_opt, s, rank * LOCAL, LOCAL)
        step(reference, ref_opt, s, 0, n * LOCAL)
    full, ref = resumed.state_dict(), reference.state_dict()
    worst = max(relative(full[k], ref[k]) for k in ref if k != "calls")
    check(worst <= 1e-5, f"{what}: resumed training differs from Adam alone by {worst:.2e}")
    other = dict(osd, param_groups=[dict(osd["param_groups"][0],
                                         params=osd["param_groups"][0]["params"][1:])])
    try:
        FullyShardedDataParallel.optim_state_dict_to_load(resumed, resumed_opt, other)
        check(False, f"{what}: another model's optimizer state was accepted")
    except ValueError as e:
        check("another model" in str(e), f"{what}: error text {e}")
    if rank == 0:
        print(f"{what}: resumed, worst relative difference {worst:.2e}", flush=True)


def hybrid_placement(sharded):
    """HYBRID_SHARD over distrun nodes: each unit is sharded among the ranks of
    this rank's node (GROUP_RANK, and its hostname: one per node where the
    nodes are real hosts, testing/netns) and replicated across the nodes,
    one rank of each; each rank keeps its part of every unit."""
    node, host = int(os.environ["GROUP_RANK"]), socket.gethostname()
    local, nodes = dist.get_local_size(), dist.get_world_size() // dist.get_local_size()
    shard = dist.all_gather_object((node, host), group=sharded._group)
    check(len(shard) == local and all(s == (node, host) for s in shard),
          f"HYBRID_SHARD: the shard group is this node's ranks: {shard}")
    replicas = dist.all_gather_object((node, host), group=sharded._replicate_group)
    check([r[0] for r in replicas] == list(range(nodes)),
          f"HYBRID_SHARD: the replicate group holds one rank of each node: {replicas}")
    hostnames = os.environ.get("DISTKIT_NETNS_HOSTNAMES")
    if hostnames:
        check([r[1] for r in replicas] == hostnames.split(","),
              f"HYBRID_SHARD: the replicas run on every host: {replicas}, {hostnames}")
    for u in sharded._units:
        want = [-(-n // local) for n in u.flat_numel]
        mine = [p.numel() for p in u.flat_params]
        check(u.shard_count == local and mine == want,
              f"HYBRID_SHARD: a rank keeps 1/{local} of unit {u.path!r}: {mine} of "
              f"{u.flat_numel} in {u.shard_count} shards")


def train(strategy, accumulate, policy, auto_groups=False,
          backward_prefetch=BackwardPrefetch.BACKWARD_PRE, offload=False):
    rank, n = dist.get_rank(), dist.get_world_size()
    groups = None
    if strategy in (ShardingStrategy.HYBRID_SHARD, ShardingStrategy._HYBRID_SHARD_ZERO2) \
            and not auto_groups:
        groups = hybrid_groups()
    torch.manual_seed(0)
    reference = Net()
    initial = copy.deepcopy(reference.state_dict())
    torch.manual_seed(rank)  # every rank starts different: sync_module_states
    model = Net()
    sharded = FullyShardedDataParallel(model, process_group=groups, sharding_strategy=strategy,
                                       auto_wrap_policy=policy, sync_module_states=True,
                                       forward_prefetch=accumulate == 1,
                                       backward_prefetch=backward_prefetch,
                                       cpu_offload=CPUOffload(offload_params=offload))
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
        print(f"{strategy.name:14} accumulate {accumulate} {backward_prefetch} offload {offload}: "
              f"worst relative "
              f"difference {worst:.2e}", flush=True)
    # The same outputs as the reference, and the full state dict loads back.
    x, _ = batch(99, 0, 4)
    with torch.no_grad():
        check(torch.allclose(sharded(x), reference(x), rtol=1e-5, atol=1e-6), "outputs")
    changed = {k: v + 1 if v.is_floating_point() else v for k, v in want.items()}
    sharded.load_state_dict(changed)
    back = sharded.state_dict()
    check(all(torch.equal(back[k], changed[k]) for k in changed), "load_state_dict round trip")
    if strategy == ShardingStrategy.FULL_SHARD and accumulate == 1 and policy is not None:
        sharded_dicts(sharded, changed)
    return sharded


class Failing(nn.Module):
    """A block whose forward raises while `fail` is set (an out-of-memory
    error in a real model), after its own unit is gathered."""

    def __init__(self, width):
        super().__init__()
        self.block = Block(width)
        self.fail = False

    def forward(self, x):
        x = self.block(x)
        if self.fail:
            raise RuntimeError("out of memory (simulated)")
        return x


def forward_raises(strategy, composable=False, param_dtype=None):
    """A forward that raises frees what it gathered before the error
    reaches the caller (through the wrapper's or a fully_shard module's
    forward) or, where the wrapped module was called itself, at the next
    forward; so do the units whose forward finished before the error (which
    SHARD_GRAD_OP and NO_SHARD's cast copies keep until a backward that
    does not come), and the gather prefetched for a unit it never reached
    is dropped: after a change of the shards (an optimizer step) the next
    forward computes with the new values, and training goes on as if the
    failed forwards never ran. The error comes in the first block (only
    the root finished) and in the second (the first block finished too)."""
    rank, n = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    reference = nn.Sequential(nn.Linear(5, 9), Failing(9), Failing(9), nn.Linear(9, 3))
    model = copy.deepcopy(reference)
    if composable:
        for block in (model[1], model[2]):
            fully_shard(block)
        sharded = fully_shard(model)
        units = model._dk_fsdp.units
        calls = [(model, 1, "through fully_shard's forward"),
                 (model, 2, "through fully_shard's forward")]
        what = "fully_shard"
    else:
        mp = MixedPrecision(param_dtype=param_dtype) if param_dtype is not None else None
        sharded = FullyShardedDataParallel(model, sharding_strategy=strategy,
                                           auto_wrap_policy=ModuleWrapPolicy({Failing}),
                                           forward_prefetch=True, mixed_precision=mp)
        units = sharded._units
        calls = [(sharded, 1, "through the wrapper"), (sharded, 2, "through the wrapper"),
                 (sharded.module, 1, "calling the wrapped module"),
                 (sharded.module, 2, "calling the wrapped module")]
        what = strategy.name + (f" {param_dtype}" if param_dtype is not None else "")
    opt = torch.optim.SGD(sharded.parameters(), lr=LR)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=LR)

    def step(k):
        x, y = batch(k, rank * LOCAL, LOCAL)
        ((sharded(x).double() - y) ** 2).mean().backward()
        opt.step()
        opt.zero_grad()
        x, y = batch(k, 0, n * LOCAL)
        ((reference(x).double() - y) ** 2).mean().backward()
        ref_opt.step()
        ref_opt.zero_grad()

    step(0)  # records the units' order: the next forwards prefetch
    frees = strategy != ShardingStrategy.NO_SHARD  # else a cast copy is only marked stale
    for k, (call, failing, how) in enumerate(calls, start=1):
        where = f"{what}, error in block {failing}, {how}"
        model[failing].fail = True
        x = batch(k, rank * LOCAL, LOCAL)[0]
        if call is not sharded and param_dtype is not None:
            x = x.to(param_dtype)  # the wrapper's forward would cast it
        try:
            call(x)
            check(False, f"{where}: the forward raised")
        except RuntimeError as e:
            check("out of memory (simulated)" in str(e), f"{where}: {e}")
        model[failing].fail = False
        if call is sharded:
            check(not any(u.gathering for u in units)
                  and all(u.aliased or not u.gathered for u in units)
                  and (not frees or all(t.storage().size() == 0 for u in units for t in u.full)),
                  f"{where}: released before the error reached the caller")
        with torch.no_grad():  # the shards change before the next forward
            for p in list(sharded.parameters()) + list(reference.parameters()):
                p.add_(0.25)
        x, _ = batch(50 + k, 0, 4)
        with torch.no_grad():
            got, want = sharded(x).double(), reference(x).double()
        # float32 rounding of a few outputs near 0 reads up to ~3e-5 here;
        # computing with the old parameters reads 7e-2 and more.
        tolerance = 1e-4 if param_dtype is None else 1e-2
        check(relative(got, want) <= tolerance,
              f"{where}: outputs with the new shards after the failed forward differ by "
              f"{relative(got, want):.2e}")
        step(10 + k)
    check(not any(u.gathering for u in units), f"{what}: no gather left in flight")
    x, _ = batch(99, 0, 4)
    with torch.no_grad():
        got, want = sharded(x).double(), reference(x).double()
    worst = relative(got, want)
    check(worst <= (1e-5 if param_dtype is None else 1e-2),
          f"{what}: after failed forwards, outputs differ from training alone by {worst:.2e}")
    if not composable:
        full, want = sharded.state_dict(), reference.state_dict()
        worst = max(relative(full[k], want[k]) for k in want)
        check(worst <= (1e-5 if param_dtype is None else 1e-2),
              f"{what}: after failed forwards, differs from training alone by {worst:.2e}")


def timeline():
    """take_timeline: with prefetch, gathers run while other units compute
    (forward: the root's and each block's forward start the next block's
    gather; backward: BACKWARD_PRE); without, every gather blocks."""
    results = {}
    for prefetch in (True, False):
        torch.manual_seed(0)
        sharded = FullyShardedDataParallel(
            Net(), auto_wrap_policy=ModuleWrapPolicy({Block}), forward_prefetch=prefetch,
            backward_prefetch=BackwardPrefetch.BACKWARD_PRE if prefetch else None)
        x, y = batch(0, 0, LOCAL)
        for step in range(2):  # the first step learns the units' order
            sharded.take_timeline()
            ((sharded(x) - y) ** 2).mean().backward()
        events = sharded.take_timeline()
        check(events == sorted(events, key=lambda e: e.unix_ns), "timeline in time order")
        kinds = {e.kind for e in events}
        check(kinds == {"unshard_start", "unshard_done", "reshard", "reduce_start",
                        "reduce_done", "forward_start", "forward_end", "backward_start",
                        "backward_end"}, f"timeline kinds {sorted(kinds)}")
        for u in range(3):
            mine = [e.kind for e in events if e.unit == u]
            check(mine.index("unshard_done") < mine.index("forward_start") <
                  mine.index("forward_end") < mine.index("backward_start") <
                  mine.index("backward_end") < mine.index("reduce_start") <
                  mine.index("reduce_done"), f"unit {u}'s events in order: {mine}")
        results[prefetch] = prefetch_overlap(events)
        check(sharded.take_timeline() == [], "taken events are gone")
    on, off = results[True], results[False]
    check(on["overlapped"] >= 3 and on["overlap_ns"] > 0,
          f"prefetched gathers overlap compute: {on}")
    check(off["gathers"] >= 5 and off["overlapped"] == 0 and off["overlap_ns"] == 0,
          f"without prefetch no gather overlaps: {off}")
    if dist.get_rank() == 0:
        print(f"timeline: with prefetch {on}, without {off}", flush=True)


def sharded_dicts(sharded, full):
    """A sharded state dict round-trips, loads again at half the ranks, and
    is refused where a full one is expected."""
    rank, n = dist.get_rank(), dist.get_world_size()
    with FullyShardedDataParallel.state_dict_type(sharded, StateDictType.SHARDED_STATE_DICT):
        mine = sharded.state_dict()
        sharded.load_state_dict(mine)  # the same shards back, as saved
    try:
        sharded.load_state_dict(mine)
        check(False, "a sharded state dict where a full one is expected")
    except RuntimeError as e:
        check("this is a sharded state dict but the model expects a full one" in str(e),
              f"mixing sharded and full state dicts: {e}")
    check(all(torch.equal(v, full[k]) for k, v in sharded.state_dict().items()),
          "sharded round trip")
    everyone = dist.all_gather_object(mine)
    half = dist.new_group(list(range(max(1, n // 2))))
    if rank < max(1, n // 2):
        torch.manual_seed(7)
        smaller = FullyShardedDataParallel(Net(), process_group=half,
                                           auto_wrap_policy=ModuleWrapPolicy({Block}))
        smaller.load_sharded_state_dicts(everyone)
        got = smaller.state_dict()
        check(all(torch.equal(got[k], full[k]) for k in full),
              f"a sharded checkpoint of {n} ranks loads at {max(1, n // 2)}")
    dist.barrier()


class Attention(nn.Module):
    """A pre-norm transformer block: self-attention, then an MLP."""

    def __init__(self, d):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))

    def forward(self, x):
        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
        att = torch.softmax(q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5, dim=-1)
        x = x + self.proj(att @ v)
        return x + self.mlp(x)


class TinyLM(nn.Module):
    """Embedding, repeated blocks, head; mmengine's model interface."""

    def __init__(self, vocab=20, d=16):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList([Attention(d) for _ in range(2)])
        self.head = nn.Linear(d, vocab)

    def data_preprocessor(self, data, training=False):
        return data

    def forward(self, tokens, targets=None, mode="tensor"):
        h = self.embed(tokens)
        for layer in self.layers:
            h = layer(h)
        logits = self.head(h)
        if mode == "loss":
            return {"loss": nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())}
        if mode == "predict":
            return list(logits.argmax(-1))
        return logits


def tokens(step, first, count):
    g = torch.Generator().manual_seed(500 + step)
    t = torch.randint(0, 20, (64, 6), generator=g)
    return t[first:first + count], torch.roll(t, -1, dims=1)[first:first + count]


def train_mm():
    """MMFullyShardedDataParallel from config values, through train_step."""
    rank, n = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    reference = TinyLM()
    torch.manual_seed(0 if rank == 0 else 100 + rank)  # rank 0 holds the reference values
    model = MMFullyShardedDataParallel(
        TinyLM(), sharding_strategy="FULL_SHARD", cpu_offload=False,
        auto_wrap_policy={"type": "torch.distributed.fsdp.wrap.ModuleWrapPolicy",
                          "module_classes": [Attention]},
        backward_prefetch="BACKWARD_PRE", sync_module_states=True)
    check(is_model_wrapper(model) and len(model._units) == 3, "wrapped, one unit per block")
    wrapper = OptimWrapper(torch.optim.SGD(model.parameters(), lr=0.5), accumulative_counts=2)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.5)
    for step in range(10):
        x, y = tokens(step, rank * LOCAL, LOCAL)
        log = model.train_step({"tokens": x, "targets": y}, wrapper)
        check("loss" in log, "train_step returns log_vars")
        gx, gy = tokens(step, 0, n * LOCAL)
        (reference(gx, gy, mode="loss")["loss"] / 2).backward()
        if step % 2 == 1:
            ref_opt.step()
            ref_opt.zero_grad()
    full, want = model.state_dict(), reference.state_dict()
    worst = max(relative(full[k], want[k]) for k in want)
    check(worst <= 1e-5, f"MMFullyShardedDataParallel: differs from training alone by {worst:.2e}")
    gx, _ = tokens(77, rank * LOCAL, LOCAL)
    predicted = model.val_step({"tokens": gx})
    with torch.no_grad():
        wanted = list(reference(gx, mode="predict"))
    check(all(torch.equal(a, b) for a, b in zip(predicted, wanted)), "val_step predictions")
    check(len(model.test_step({"tokens": gx})) == LOCAL, "test_step")
    if rank == 0:
        print(f"MMFullyShardedDataParallel transformer, train_step: worst relative difference "
              f"{worst:.2e}", flush=True)


class HFConfig:
    architectures = ["TinyForCausalLM"]


class TinyForCausalLM(nn.Module):
    """The HF causal-LM layout: model.embed_tokens, model.layers, model.norm,
    lm_head, config; plus a float64 parameter (off the dominant dtype)."""

    def __init__(self, vocab=20, d=16):
        super().__init__()
        self.config = HFConfig()
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(vocab, d)
        self.model.layers = nn.ModuleList([Attention(d) for _ in range(3)])
        self.model.norm = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab)
        self.temperature = nn.Parameter(torch.ones(1, dtype=torch.float64), requires_grad=False)

    def forward(self, tokens):
        h = self.model.embed_tokens(tokens)
        for layer in self.model.layers:
            h = layer(h)
        return self.lm_head(self.model.norm(h)) / self.temperature.float()


def train_fsdp2():
    """modelopt's fsdp2_wrap on an HF-layout model, trained against the same
    model alone on the global batch."""
    import warnings
    from distkit import distributed
    rank, n = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    reference = TinyForCausalLM()
    torch.manual_seed(0 if rank == 0 else 200 + rank)
    model = TinyForCausalLM()
    model.load_state_dict(reference.state_dict())  # fully_shard does not sync states
    check(not distributed.is_fsdp2_model(model), "not FSDP2 before the wrap")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        layers = distributed.fsdp2_wrap(model)
    check(layers is model.model.layers, "fsdp2_wrap returns the decoder layers")
    check(distributed.is_fsdp2_model(model), "is_fsdp2_model after the wrap")
    check(model.config.architectures == ["TinyForCausalLM"], "config.architectures kept")
    check(rank != 0 or any("Model has mixed parameter dtypes" in str(w.message) for w in caught),
          "the off-dtype warning on rank 0")
    check(isinstance(model.temperature, nn.Parameter), "the off-dtype parameter stays replicated")
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.5)
    for step in range(5):
        x, y = tokens(step, rank * LOCAL, LOCAL)
        nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten()).backward()
        opt.step()
        opt.zero_grad()
        gx, gy = tokens(step, 0, n * LOCAL)
        nn.functional.cross_entropy(reference(gx).flatten(0, 1), gy.flatten()).backward()
        ref_opt.step()
        ref_opt.zero_grad()
    x, _ = tokens(55, 0, 8)
    with torch.no_grad():
        got, want = model(x), reference(x)
    worst = relative(got, want)
    check(worst <= 1e-5, f"fsdp2_wrap: outputs differ from training alone by {worst:.2e}")
    try:
        distributed.fsdp2_wrap(nn.Sequential(nn.Linear(2, 2)))
        check(False, "a model without decoder layers is refused")
    except RuntimeError as e:
        check(str(e) == "Could not auto-detect decoder layers; FSDP2 wrap requires a standard "
              "HF causal-LM layout.", f"fsdp2_wrap error text: {e}")
    if rank == 0:
        print(f"fsdp2_wrap HF layout: outputs' relative difference {worst:.2e}", flush=True)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def main():
    dist.init_dist("pytorch", backend="gloo")
    policy = ModuleWrapPolicy({Block})
    if "--hybrid-nodes" in sys.argv:
        # A job of several distrun "nodes": init_dist made each node's
        # local group from GROUP_RANK, and HYBRID_SHARD finds its groups
        # from LOCAL_WORLD_SIZE (shard inside a node, replicate across).
        check((dist.get_local_rank(), dist.get_local_size()) ==
              (int(os.environ["LOCAL_RANK"]), int(os.environ["LOCAL_WORLD_SIZE"])),
              "the node-local group after init_dist")
        hybrid_placement(train(ShardingStrategy.HYBRID_SHARD, 1, policy, auto_groups=True))
        train(ShardingStrategy.HYBRID_SHARD, 2, policy, auto_groups=True)
        dist.barrier()
        status = finish("hybrid checks")
        dist.destroy()
        return status
    for strategy in (ShardingStrategy.FULL_SHARD, ShardingStrategy.SHARD_GRAD_OP,
                     ShardingStrategy.NO_SHARD, ShardingStrategy.HYBRID_SHARD,
                     ShardingStrategy._HYBRID_SHARD_ZERO2):
        train(strategy, 1, policy)
        train(strategy, 2, policy)
    train(ShardingStrategy.FULL_SHARD, 1, None)
    train(ShardingStrategy.FULL_SHARD, 1, policy, backward_prefetch=BackwardPrefetch.BACKWARD_POST)
    train(ShardingStrategy.FULL_SHARD, 2, policy, backward_prefetch=None)
    for strategy in ShardingStrategy:  # the shard offloaded (host memory)
        train(strategy, 1, policy, offload=True)
    timeline()
    forward_raises(ShardingStrategy.FULL_SHARD)
    forward_raises(ShardingStrategy.SHARD_GRAD_OP)
    forward_raises(ShardingStrategy.NO_SHARD, param_dtype=torch.float64)
    forward_raises(None, composable=True)
    train_orig_params()
    buffer_dtype()
    train_optim_state(True)
    train_optim_state(False)
    train_bf16()
    train_mm()
    train_fsdp2()
    check(size_based_auto_wrap_policy(nn.Linear(2, 2), False, 100, min_num_params=50),
          "size policy")
    dist.barrier()
    status = finish("fsdp checks")
    dist.destroy()
    return status


if __name__ == "__main__":
    sys.exit(main())
