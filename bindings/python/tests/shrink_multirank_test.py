"""Recovery without restarting, from Python, in a real job (world sizes
2-4): a linear model trained with mean-reduced gradients; before step 5 the
last rank dies. The survivors' step 5 fails; each calls
dist.shrink_group(), which makes a group of the survivors the default one,
and they finish training at world size - 1. The weights must equal training
computed here without communication. torch's default process group from
before the shrink (what a DDP model built then holds) fails on the old world:
it used to run on the survivors' group at the old rank and size."""
import os
import sys

import torch
import torch.distributed as tdist

from distkit import dist, errors
from testing.python.rank_check import check, finish

DIM, STEPS, DIES_BEFORE, LR = 4, 10, 5, 0.1


def grad(r, w):
    x = torch.tensor([r + 1.0, 1.0, -float(r), 0.5], dtype=torch.float64)
    return (w @ x - (2.0 * r - 1.0)) * x


def reference(size):
    w = torch.zeros(DIM, dtype=torch.float64)
    for step in range(STEPS):
        n = size if step < DIES_BEFORE else size - 1
        w = w - LR * sum(grad(r, w) for r in range(n)) / n
    return w


def main():
    dist.init_dist("pytorch", backend="gloo", timeout=20)
    rank, size = dist.get_rank(), dist.get_world_size()
    if size < 2:
        print("one rank: nothing to shrink")
        return 0
    old_torch_world = tdist.distributed_c10d._get_default_group()
    w = torch.zeros(DIM, dtype=torch.float64)
    step, shrunk = 0, False
    while step < STEPS:
        if step == DIES_BEFORE and rank == size - 1:
            print(f"rank {rank} dies before step {step}", flush=True)
            os._exit(0)
        g = grad(rank, w)
        try:
            dist.all_reduce(g, op="mean")
        except errors.DistkitError as e:
            check(step == DIES_BEFORE and not shrunk, f"only step {DIES_BEFORE} fails: {e}")
            print(f"rank {rank}: step {step} failed ({e}); shrinking", flush=True)
            survivors = dist.shrink_group(settle=2.0)
            shrunk = True
            check(survivors.size() == size - 1, "the survivors' group")
            check(dist.get_world_size() == size - 1 and dist.get_rank() == rank,
                  "it is the default group now, ranks in their old order")
            try:
                t = torch.ones(2)
                old_torch_world.allreduce([t]).wait()
                check(False, f"torch's process group from before the shrink ran on the "
                             f"survivors' group: {t.tolist()}")
            except RuntimeError as e:
                print(f"rank {rank}: the old torch group fails: {str(e)[:120]}", flush=True)
            continue
        w = w - LR * g
        step += 1
    check(shrunk, "the job shrank")
    check(torch.allclose(w, reference(size), rtol=1e-9, atol=1e-12),
          f"weights {w.tolist()} equal training without communication")
    dist.barrier()
    return finish("shrink checks")


if __name__ == "__main__":
    sys.exit(main())
