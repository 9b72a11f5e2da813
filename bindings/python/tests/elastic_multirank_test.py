"""distkit.elastic with DDP (MMDistributedDataParallel) or, with the argument
"fsdp", FullyShardedDataParallel (FULL_SHARD, one unit per Linear; with
"orig" too, use_orig_params=True): a rank
is SIGKILLed at a random step and point, and the job still ends with the
parameters of an uninterrupted run. Under FSDP each rank's shard exists
once: the lost one comes back from the neighbour's copy, and each rank's
snapshot holds at most 2/N of the model's state plus one unit (checked).

Under ``distrun --max-replacements 2`` the lost rank's replacement joins
(grown back to N ranks); with the argument "shrink", under ``distrun
--min-ranks 1`` and no replacement, the survivors shrink to N - 1 and finish.
Either way every step trains on the same global batch (ElasticSampler keeps
it; each rank's share changes with the world size), so the reference is one
schedule: plain torch in one process, full-batch mean loss, SGD with
momentum, computed here without any of distkit's code. Float64 everywhere;
the comparison allows 1e-9 relative because the all_reduce sums the ranks'
gradients in another order than the reference's one-batch mean.

Rank 0 draws (victim, step, point) from a random seed (printed; set
ELASTIC_SEED to replay one): before the forward, mid-backward (a gradient
hook, while DDP's buckets are in flight), after the optimizer step, at a
commit (the others are in the commit's all_gather), in elastic.run's first
commit before any step (DDP: each survivor's starting state is commit 0), or
before the forward
with a second rank dying in the survivors' recovery (at ws >= 3: a second
replacement, or a second shrink; under FSDP, when the two are neighbours,
the shard they both held is lost and every rank must end with that clear
error). Checked as well: exactly
one recovery on every rank; the parameters moved after the kill (a run that
skipped the remaining steps cannot pass); no file written (torch.save to a
path is refused, the working directory stays empty); the snapshot a
recovering rank receives loads under torch >= 2.6's default of torch.load,
weights_only=True (imposed here on older torch). Launched by distrun
with --max-replacements 2, or --min-ranks 1 for "shrink"."""
import ctypes
import datetime
import functools
import inspect
import os
import random
import shutil
import signal
import sys
import tempfile
import time

import torch

from distkit import dist, elastic, torch_backend
from distkit._lib import StoreConfig, lib, raise_for_status
from distkit.fsdp import FullyShardedDataParallel, ModuleWrapPolicy, ShardingStrategy
from distkit.model import MMDistributedDataParallel
from testing.python import rank_check
from testing.python.rank_check import check, finish

HIDDEN = 64
# 10 divides unevenly over 3 and 4 ranks: the shares differ, and the loss
# weight (ElasticSampler.loss_weight) keeps the result the global batch's.
SAMPLES, FEATURES, GLOBAL_BATCH, EPOCHS, COMMIT_EVERY = 240, 6, 10, 2, 4
LR, MOMENTUM, SEED, TIMEOUT = 0.05, 0.9, 7, 20
# Where the first victim dies; the "in_recovery" ones kill a second rank in
# the survivors' recovery (at its start, or at the snapshot's broadcast).
POINTS = ("before_forward", "mid_backward", "after_step", "at_commit", "after_gather",
          "before_confirm", "in_recovery", "in_recovery_late", "first_commit")
AT_COMMITS = ("at_commit", "after_gather", "before_confirm")


def data():
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(SAMPLES, FEATURES, generator=g, dtype=torch.float64)
    y = torch.sin(x @ torch.linspace(-1, 1, FEATURES, dtype=torch.float64)).unsqueeze(1)
    return x, y


def make_net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, HIDDEN), torch.nn.Tanh(),
                               torch.nn.Linear(HIDDEN, 1)).double()


def reference(x, y, steps):
    """Plain torch, one process: the first `steps` steps of the schedule."""
    net = make_net()
    opt = torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM)
    per_epoch = SAMPLES // GLOBAL_BATCH
    done = 0
    for epoch in range(EPOCHS):
        order = torch.randperm(SAMPLES, generator=torch.Generator().manual_seed(SEED + epoch))
        for b in range(per_epoch):
            if done == steps:
                return [p.detach().clone() for p in net.parameters()]
            idx = order[b * GLOBAL_BATCH:(b + 1) * GLOBAL_BATCH]
            opt.zero_grad()
            ((net(x[idx]) - y[idx]) ** 2).mean().backward()
            opt.step()
            done += 1
    return [p.detach().clone() for p in net.parameters()]


def refuse_files(path_like, *args, **kwargs):
    raise AssertionError(f"a file was written during elastic training: {path_like}")


def wait_until_survivors_gave_up():
    """late, in the replacement: waits, in distrun's store, until the
    survivors' first grow (generation 1 of their world's, cc/group/grow.h)
    is sealed as failed without it, as capi/test/grow_c_multirank_test.c's
    after_first_try does: they waited their 1 s and shrink. A fixed delay
    here could end before a survivor slowed by the load stopped waiting."""
    config = StoreConfig()
    lib.dk_store_config_init(ctypes.byref(config))
    config.address = os.environ["DISTKIT_STORE"].encode()
    token = os.environ.get("DISTKIT_TOKEN")
    config.token = token.encode() if token else None
    config.timeout_ms = config.connect_timeout_ms = 3 * TIMEOUT * 1000
    handle = ctypes.c_void_p()
    raise_for_status(lib.dk_store_connect, ctypes.byref(config), ctypes.byref(handle))
    store = torch_backend.DistkitStore(handle, prefix="")  # destroys the handle
    seal = "world1/elastic/1/members"  # the survivors' first init_dist: world1
    store.wait([seal], datetime.timedelta(seconds=3 * TIMEOUT))
    rank = os.environ["RANK"]
    check(store.get(seal) == f"failed:{rank}".encode(),
          f"the survivors' grow failed without rank {rank}: {store.get(seal)!r}")


def main():
    shrink = "shrink" in sys.argv[1:]
    # late: the replacement comes after the survivors stopped waiting (1 s)
    # and shrank; it is grown back in at a later commit.
    late = "late" in sys.argv[1:]
    fsdp = "fsdp" in sys.argv[1:]
    # orig: FSDP with use_orig_params=True (the optimizer steps the original
    # parameters, each a view of its piece of the shard).
    orig = "orig" in sys.argv[1:]
    # first_commit: the victim always dies in elastic.run's first commit
    # (FSDP: every survivor must end with the clear error).
    first_commit = "first_commit" in sys.argv[1:]
    replacement = elastic.membership.is_replacement()
    # Under Bazel in the test's own directory, which Bazel removes (a killed
    # rank cannot remove its own); a finished rank removes it too.
    workdir = tempfile.mkdtemp(prefix="elastic_ddp_", dir=os.environ.get("TEST_TMPDIR"))
    os.chdir(workdir)
    real_save = torch.save
    torch.save = lambda obj, f, *a, **k: (real_save(obj, f, *a, **k) if hasattr(f, "write")
                                          else refuse_files(f))
    real_load = torch.load

    @functools.wraps(real_load)
    def load_as_torch_2_6(f, *a, **k):  # weights_only=True unless told otherwise
        k.setdefault("weights_only", True)
        return real_load(f, *a, **k)
    if "weights_only" in inspect.signature(real_load).parameters:
        torch.load = load_as_torch_2_6

    if late and replacement:
        wait_until_survivors_gave_up()
    dist.init_dist("pytorch", backend="gloo", timeout=TIMEOUT)
    rank, size = dist.get_rank(), dist.get_world_size()
    per_epoch = SAMPLES // GLOBAL_BATCH
    total = EPOCHS * per_epoch
    # The kill: drawn on rank 0, known to every original rank.
    plan = [None]
    if not replacement:
        if rank == 0:
            seed = int(os.environ.get("ELASTIC_SEED", random.SystemRandom().randrange(1 << 30)))
            draw = random.Random(seed)
            points = [p for p in POINTS if (size >= 3 and not late
                                            or not p.startswith("in_recovery"))
                      and (fsdp or p != "before_confirm")  # DDP's commit has no barrier
                      # FSDP: the lost shard of the start is nowhere (its own test)
                      and not (fsdp and p == "first_commit")]
            point = "first_commit" if first_commit else draw.choice(points)
            steps = [s for s in range(1, total - 1)
                     if point not in AT_COMMITS or (s % per_epoch + 1) % COMMIT_EVERY == 0]
            if point == "first_commit":
                steps = [-1]  # elastic.run's own commit, before the first step
            victim = draw.randrange(size)
            second = draw.choice([r for r in range(size) if r != victim])
            plan = [(seed, victim, draw.choice(steps), point, second)]
        dist.broadcast_object_list(plan, 0)
        seed, victim, die_at, point, second = plan[0]
        if rank == 0:
            print(f"ELASTIC_SEED={seed}: rank {victim} dies at step {die_at}, {point}"
                  + (f", rank {second} in the recovery" if point.startswith("in_recovery")
                     else ""), flush=True)
    else:
        victim, die_at, point, second = -1, -1, "", -1  # a replacement lives

    # The second victim: at the start of its recovery's sync, or at the
    # snapshot's broadcast in it (after the members agreed on the commit).
    real_sync, real_broadcast = elastic.peer_sync.sync, dist.broadcast_object_list
    syncing = [False]

    def sync_or_die(state):
        if point == "in_recovery" and rank == second:
            print(f"rank {rank}: SIGKILL in the recovery", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        syncing[0] = True
        try:
            return real_sync(state)
        finally:
            syncing[0] = False

    def broadcast_or_die(*args, **kwargs):
        if point == "in_recovery_late" and rank == second and syncing[0]:
            print(f"rank {rank}: SIGKILL at the recovery's broadcast", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        return real_broadcast(*args, **kwargs)
    elastic.peer_sync.sync = sync_or_die
    dist.broadcast_object_list = broadcast_or_die

    x, y = data()
    # A replacement's construction matches the survivors' regroup.
    if fsdp:
        model = FullyShardedDataParallel(make_net(), sharding_strategy=ShardingStrategy.FULL_SHARD,
                                         auto_wrap_policy=ModuleWrapPolicy({torch.nn.Linear}),
                                         use_orig_params=orig)
    else:
        model = MMDistributedDataParallel(make_net())
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    sampler = elastic.ElasticSampler(SAMPLES, GLOBAL_BATCH, shuffle=True, seed=SEED)
    # FSDP's exchange on a thread of its own (asked for), except under
    # "orig", which keeps the default: inside commit().
    state = elastic.State(model=model, optimizer=opt, sampler=sampler, epoch=0,
                          overlap_commit=True if fsdp and not orig else None)

    def die_here(step, where):
        first = "before_forward" if point.startswith("in_recovery") else point
        if rank == victim and step == die_at and where == first:
            print(f"rank {rank}: SIGKILL at step {step} ({where})", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

    current = {"step": -1}

    # In a commit: after its all_gather (the snapshot being copied), and
    # (FSDP) after the shards' exchange, at the barrier that confirms it.
    real_capture, real_barrier = elastic.State._capture, dist.barrier
    real_commit = elastic.State.commit

    # The step of the commit under way: FSDP's exchange and its confirming
    # barrier run on a thread of their own, while the next step goes on.
    committing = {"step": -1}

    def commit_or_die(self):
        # Before the commit's all_gather: the others wait in it.
        die_here(current["step"], "first_commit")
        self._settle()  # the previous exchange's barrier, at its own step
        committing["step"] = current["step"]
        return real_commit(self)
    elastic.State.commit = commit_or_die

    def capture_or_die(self, commit):
        die_here(current["step"], "after_gather")
        return real_capture(self, commit)

    def barrier_or_die(*args, **kwargs):
        die_here(committing["step"], "before_confirm")
        return real_barrier(*args, **kwargs)
    elastic.State._capture = capture_or_die
    dist.barrier = barrier_or_die

    def mid_backward(module, grad_input, grad_output):
        die_here(current["step"], "mid_backward")
    # The last layer's backward is done, the first one's not yet: the
    # gradients of one unit (FSDP) or bucket (DDP) are in flight.
    model.module[2].register_full_backward_hook(mid_backward)

    def train(state):
        while state.epoch < EPOCHS:
            for indices in state.sampler:
                step = state.epoch * per_epoch + state.sampler.batch - 1
                current["step"] = step
                die_here(step, "before_forward")
                idx = torch.tensor(indices)
                opt.zero_grad()
                loss = ((model(x[idx]) - y[idx]) ** 2).mean() * state.sampler.loss_weight()
                loss.backward()
                opt.step()
                die_here(step, "after_step")
                if state.sampler.batch % COMMIT_EVERY == 0:
                    die_here(step, "at_commit")
                    wait_for_late_replacement()
                    state.commit()
            state.epoch += 1
            state.sampler.set_epoch(state.epoch)
            wait_for_late_replacement()
            state.commit()

    def wait_for_late_replacement():
        """late: in the shrunk job, wait until the replacement registered
        (so the job cannot end before it arrives); the commit then grows it
        in."""
        if late and dist.get_world_size() < size:
            give_up = time.monotonic() + TIMEOUT
            while not dist.grow_pending() and time.monotonic() < give_up:
                time.sleep(0.05)

    # FSDP keeps each shard on its rank and its left neighbour: two
    # neighbours lost at once lose a shard, and every rank must say so.
    adjacent = point.startswith("in_recovery") and (second - victim) % size in (1, size - 1)
    expect_lost = fsdp and adjacent
    start_lost = fsdp and point == "first_commit"
    try:
        elastic.run(train, state, replacement_timeout=1.0 if late else TIMEOUT, settle=2.0)
    except RuntimeError as e:
        if start_lost and "no rank holds a committed snapshot of the sharded model" in str(e):
            print(f"rank {rank}: the clear error expected: {e}", flush=True)
            return finish("FSDP: a rank lost in the first commit, a clear error on every rank")
        if "are lost" not in str(e) or not (expect_lost or replacement):
            raise
        # A replacement does not know the plan; the survivors check it.
        print(f"rank {rank}: the clear error expected: {e}", flush=True)
        return finish("FSDP: two neighbours lost, a clear error on every rank")
    check(not expect_lost, "two neighbours lost under FSDP end in an error")
    check(not start_lost, "a rank lost in FSDP's first commit ends in an error")

    want = reference(x, y, total)
    if fsdp:
        full = model.state_dict()  # FULL_STATE_DICT: collective
        got = [full[k] for k, _ in make_net().named_parameters()]
    else:
        got = [p.detach() for p in model.module.parameters()]
    for i, (g, w) in enumerate(zip(got, want)):
        check(torch.allclose(g, w, rtol=1e-9, atol=1e-12),
              f"parameter {i} equals the uninterrupted run's: max diff {(g - w).abs().max().item()}")
    if not replacement:
        at_kill = reference(x, y, max(die_at, 0))
        moved = max((g - k).abs().max().item() for g, k in zip(got, at_kill))
        check(moved > 1e-6, f"the parameters moved after the kill at step {die_at}: {moved}")
    want_recoveries = 2 if late and not replacement else 1  # late: shrunk, then grown back
    check(state.recoveries == want_recoveries,
          f"{want_recoveries} recoveries on this rank: {state.recoveries}")
    lost = 2 if point.startswith("in_recovery") else 1
    expect = size - lost if shrink and not late else size
    if replacement:
        expect = dist.get_world_size()  # the grown world, checked by the survivors
    check(dist.get_world_size() == expect, f"world size after recovery: {dist.get_world_size()}")
    check(state.snapshot_bytes() > 0, "a snapshot in memory")
    if fsdp:
        # Parameters and momentum, float64; a unit: the largest Linear's.
        net = make_net()
        whole = 2 * 8 * sum(p.numel() for p in net.parameters())
        unit = 2 * 8 * max(sum(p.numel() for p in m.parameters())
                           for m in net if isinstance(m, torch.nn.Linear))
        n = dist.get_world_size()
        bound = (2 * whole // n if n > 1 else whole) + unit
        held = state.snapshot_bytes(model_only=True)
        check(0 < held <= bound,
              f"FSDP snapshot {held} B within 2/N of {whole} B plus one unit ({bound} B)")
    check(os.listdir(workdir) == [], f"nothing written to the working directory: {os.listdir(workdir)}")
    os.chdir("/")
    shutil.rmtree(workdir, ignore_errors=True)
    # Under --min-ranks the launcher lets a failing rank go while enough
    # remain: every rank fails when any check failed anywhere, so the last
    # one's failure is the job's.
    failed = torch.tensor([float(rank_check.failures())])
    dist.all_reduce(failed)
    check(failed.item() == 0, f"{int(failed.item())} checks failed across the ranks")
    return finish(("FSDP: " if fsdp else "DDP: ") + (
        "shrank and finished" if shrink
        else "joined as a replacement" if replacement else "recovered with a replacement"))


if __name__ == "__main__":
    sys.exit(main())
