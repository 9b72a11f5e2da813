"""Elastic recovery from Python, under distrun --max-replacements 1 (world
sizes 3 and 4), as capi/test/grow_c_multirank_test.c does it in C: checked
all_reduces; before step DIE_AT rank 1 SIGKILLs itself. The survivors' step
fails (DistkitError); they shrink the default group (dist.shrink_group) and
run checked steps at N - 1, then dist.grow_group() while distrun's new
process for rank 1 (DISTKIT_REPLACEMENT=1) enters through init_dist, which
joins the same grow. Everyone then holds a world of N again, in the original
rank order (an all_gather of world ranks says so); the newcomer gets the step
counter by broadcast and the steps at N are checked again; torch's default
group follows distkit's after the shrink and the grow (rank, size, an
all_reduce through torch.distributed). With the argument
"direct" the survivors grow straight from the failed world, without a
shrink. Every expected sum is computed here from the formula for the members
each phase must have; a failed check exits 1, which the spent replacement
budget turns into the job's failure."""
import os
import signal
import sys

import torch

from distkit import dist, errors
from testing.python.rank_check import check, finish

DIM, VICTIM, DIE_AT, SHRUNK_STEPS, GROWN_STEPS, TIMEOUT = 5, 1, 3, 3, 3, 20
# The survivors' wait for the replacement covers its whole start: a new
# process that imports torch, which took over 20 s beside three other tests
# on 2 cores (a fresh-clone CI run).
GROW_TIMEOUT = 60


def value(step, r):
    """World rank r's contribution at `step`."""
    return torch.tensor([(step + 1) * 100.0 + (r + 1) * (i + 1) for i in range(DIM)],
                        dtype=torch.float64)


def step_on(step, rank, members):
    """One all_reduce (sum) on the default group at `step`, checked against
    the sum over the world ranks `members`; raises what the library raised."""
    t = value(step, rank)
    dist.all_reduce(t, op="sum")
    want = sum(value(step, r) for r in members)
    check(torch.equal(t, want), f"step {step}: {t.tolist()} sums {members}: {want.tolist()}")


def check_order(group, rank, members):
    """The world ranks of `group`'s members, in group order, by all_gather
    (`rank`: this process's world rank)."""
    got = dist.all_gather(torch.tensor([rank], dtype=torch.int64), group)
    check([int(x) for x in got] == members,
          f"group ranks in the original world order: {[int(x) for x in got]}, want {members}")


def check_torch(rank, size, when):
    """torch.distributed's default group follows distkit's (init_dist made
    it): its rank, size and an all_reduce (sum of ranks + 1)."""
    import torch.distributed as tdist
    check((tdist.get_rank(), tdist.get_world_size()) == (rank, size),
          f"{when}: torch's default group is rank {tdist.get_rank()} of "
          f"{tdist.get_world_size()}, want {rank} of {size}")
    t = torch.tensor([float(rank + 1)])
    tdist.all_reduce(t)
    check(t.item() == size * (size + 1) / 2, f"{when}: torch's all_reduce gives {t.item()}")


def main():
    direct = sys.argv[1:] == ["direct"]
    shrunk_steps = 0 if direct else SHRUNK_STEPS
    replacement = os.environ.get("DISTKIT_REPLACEMENT", "")
    dist.init_dist("pytorch", backend="gloo", timeout=TIMEOUT)
    rank, size = dist.get_rank(), dist.get_world_size()
    if size < 3:
        print(f"rank {rank}: needs 3 ranks or more", flush=True)
        return 1
    everyone = list(range(size))
    survivors = [r for r in everyone if r != VICTIM]
    step = 0
    if replacement:
        # init_dist joined the survivors' grow: its world is the grown group.
        check(replacement == "1", "the job's first replacement")
        check(rank == VICTIM, "the replacement takes the lost rank")
        grown = dist.groups._default_group  # distkit's world (not torch's twin)
        print(f"rank {rank}: replacement {replacement} joined "
              f"'{dist.groups._default_group.name()}'", flush=True)
    else:
        for step in range(DIE_AT):
            step_on(step, rank, everyone)
        step = DIE_AT
        if rank == VICTIM:
            print(f"rank {rank}: SIGKILL before step {step}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            step_on(step, rank, everyone)
            check(False, f"step {step}, the one rank {VICTIM} died in, fails")
        except errors.DistkitError as e:
            check(isinstance(e, (errors.UnavailableError, errors.DeadlineExceededError)),
                  f"a lost peer or a timeout: {type(e).__name__}")
            print(f"rank {rank}: step {step} failed ({e}); "
                  f"{'growing from the failed world' if direct else 'shrinking'}", flush=True)
        shrunk = None
        if not direct:
            shrunk = dist.shrink_group(settle=2.0)
            check(shrunk.size() == size - 1, "the survivors' group")
            check(dist.get_rank() == survivors.index(rank), "renumbered in the old order")
            check_torch(survivors.index(rank), size - 1, "after the shrink")
            check_order(shrunk, rank, survivors)
            for _ in range(SHRUNK_STEPS):
                step_on(step, rank, survivors)
                step += 1
            print(f"rank {rank}: {SHRUNK_STEPS} steps at {size - 1} ranks; growing", flush=True)
        grown = dist.grow_group(timeout=GROW_TIMEOUT)
        if shrunk is not None:
            try:
                dist.all_reduce(torch.ones(1, dtype=torch.float64), group=shrunk)
                check(False, "the shrunk group is aborted")
            except errors.DistkitError:
                pass
    # Both sides: the grown group is the default one, of the original size.
    check(grown.size() == size and dist.get_world_size() == size,
          "grown back to the job's size, as the default group")
    check(grown.rank() == rank and dist.get_rank() == rank, "world ranks kept")
    check(dist.groups._default_group.name().startswith("world@g1"),
          f"the grown group carries generation 1: {dist.groups._default_group.name()}")
    check_order(None, rank, everyone)
    check_torch(rank, size, "after the grow")
    counter = torch.tensor([step], dtype=torch.int64)
    dist.broadcast(counter, 0)
    check(int(counter) == DIE_AT + shrunk_steps, f"the step counter from rank 0: {int(counter)}")
    step = int(counter)
    for _ in range(GROWN_STEPS):
        step_on(step, rank, everyone)
        step += 1
    dist.barrier()
    return finish("joined as a replacement" if replacement
                  else "grew from the failed world" if direct else "shrank and grew")


if __name__ == "__main__":
    sys.exit(main())
