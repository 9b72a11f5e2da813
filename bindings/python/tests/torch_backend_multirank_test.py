"""torch.distributed on the "distkit" backend, beside torch's own Gloo in the
same job: every collective torch exposes gives Gloo's values (or, where
torch 1.13's Gloo lacks the op, values every rank computes itself), also
asynchronously and on a subgroup with global ranks; torch's own
DistributedDataParallel trains to Gloo DDP's parameters; DistributedSampler
gives the same shards. Default: distkit.dist.init_dist initializes torch's
default group on "distkit". --standalone: torch.distributed.init_process_group
("distkit") alone (distkit joins through torch's store)."""
import os
import sys

import torch
import torch.distributed as tdist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data.distributed import DistributedSampler

from distkit import dist
from testing.python.rank_check import check, finish


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


def data(rank, salt, n=6, dtype=torch.float32):
    g = torch.Generator().manual_seed(100 * salt + rank)
    if dtype.is_floating_point:
        return torch.randn(n, generator=g).to(dtype)
    return torch.randint(1, 9, (n,), generator=g, dtype=dtype)


def collectives(gloo, rank, n):
    ops = {"sum": tdist.ReduceOp.SUM, "max": tdist.ReduceOp.MAX, "min": tdist.ReduceOp.MIN,
           "product": tdist.ReduceOp.PRODUCT}
    for dtype in (torch.float32, torch.int64):
        for name, op in ops.items():
            a, b = data(rank, 1, dtype=dtype), data(rank, 1, dtype=dtype)
            tdist.all_reduce(a, op=op)
            tdist.all_reduce(b, op=op, group=gloo)
            check(torch.allclose(a.double(), b.double(), rtol=1e-6), f"all_reduce {name} {dtype}")
    for name, op in (("band", tdist.ReduceOp.BAND), ("bor", tdist.ReduceOp.BOR),
                     ("bxor", tdist.ReduceOp.BXOR)):
        a, b = data(rank, 2, dtype=torch.int64), data(rank, 2, dtype=torch.int64)
        tdist.all_reduce(a, op=op)
        tdist.all_reduce(b, op=op, group=gloo)
        check(same(a, b), f"all_reduce {name}")
    # broadcast from the last rank, reduce to rank 0
    a, b = data(rank, 3), data(rank, 3)
    tdist.broadcast(a, n - 1)
    tdist.broadcast(b, n - 1, group=gloo)
    check(same(a, b) and same(a, data(n - 1, 3)), "broadcast")
    a, b = data(rank, 4), data(rank, 4)
    tdist.reduce(a, 0)
    tdist.reduce(b, 0, group=gloo)
    check(rank != 0 or torch.allclose(a, b, rtol=1e-6), "reduce")
    # all_gather (list and flat), gather, scatter
    mine = data(rank, 5)
    outs_a = [torch.zeros(6) for _ in range(n)]
    outs_b = [torch.zeros(6) for _ in range(n)]
    tdist.all_gather(outs_a, mine)
    tdist.all_gather(outs_b, mine, group=gloo)
    check(all(same(x, y) for x, y in zip(outs_a, outs_b)), "all_gather")
    flat = torch.zeros(6 * n)
    tdist._all_gather_base(flat, mine)
    check(same(flat, torch.cat([data(r, 5) for r in range(n)])), "_all_gather_base")
    g_a = [torch.zeros(6) for _ in range(n)] if rank == n - 1 else None
    g_b = [torch.zeros(6) for _ in range(n)] if rank == n - 1 else None
    tdist.gather(mine, g_a, dst=n - 1)
    tdist.gather(mine, g_b, dst=n - 1, group=gloo)
    check(rank != n - 1 or all(same(x, y) for x, y in zip(g_a, g_b)), "gather")
    pieces = [data(r, 6) for r in range(n)] if rank == 0 else None
    s_a, s_b = torch.zeros(6), torch.zeros(6)
    tdist.scatter(s_a, pieces, src=0)
    tdist.scatter(s_b, [p.clone() for p in pieces] if pieces else None, src=0, group=gloo)
    check(same(s_a, s_b) and same(s_a, data(rank, 6)), "scatter")
    # reduce_scatter (torch 1.13's Gloo has none): every rank's input summed
    ins = [data(rank, 7 + r) for r in range(n)]
    out = torch.zeros(6)
    tdist.reduce_scatter(out, ins)
    want = sum(data(q, 7 + rank) for q in range(n))
    check(torch.allclose(out, want, rtol=1e-6), "reduce_scatter")
    out = torch.zeros(6)
    tdist._reduce_scatter_base(out, torch.cat(ins))
    check(torch.allclose(out, want, rtol=1e-6), "_reduce_scatter_base")
    # all_to_all: equal and uneven splits, and the list form
    src = torch.arange(3 * n, dtype=torch.float32) + 100 * rank
    a, b = torch.zeros(3 * n), torch.zeros(3 * n)
    tdist.all_to_all_single(a, src)
    tdist.all_to_all_single(b, src, group=gloo)
    check(same(a, b), "all_to_all_single")
    in_splits = [r + 1 for r in range(n)]          # rank r sends r' + 1 rows to r'
    out_splits = [rank + 1] * n                     # and gets rank + 1 from each
    src = torch.arange(sum(in_splits), dtype=torch.float32).unsqueeze(1).repeat(1, 2) + 100 * rank
    a = torch.zeros(sum(out_splits), 2)
    tdist.all_to_all_single(a, src, out_splits, in_splits)
    want = torch.cat([torch.arange(sum(range(1, rank + 1)), sum(range(1, rank + 2)),
                                   dtype=torch.float32).unsqueeze(1).repeat(1, 2) + 100 * q
                      for q in range(n)])
    check(same(a, want), "all_to_all_single, uneven")
    lists_in = [torch.full((2,), float(10 * rank + r)) for r in range(n)]
    lists_out = [torch.zeros(2) for _ in range(n)]
    tdist.all_to_all(lists_out, lists_in)
    check(all(same(t, torch.full((2,), float(10 * q + rank))) for q, t in enumerate(lists_out)),
          "all_to_all")
    tdist.barrier()
    # send / recv around a ring
    if n > 1:
        got = torch.zeros(4)
        if rank % 2 == 0:
            tdist.send(torch.full((4,), float(rank)), (rank + 1) % n)
            tdist.recv(got, (rank - 1) % n)
        else:
            tdist.recv(got, (rank - 1) % n)
            tdist.send(torch.full((4,), float(rank)), (rank + 1) % n)
        check(same(got, torch.full((4,), float((rank - 1) % n))), "send / recv")
    # asynchronous
    a = data(rank, 8)
    work = tdist.all_reduce(a, async_op=True)
    work.wait()
    check(work.is_completed() and torch.allclose(a, sum(data(r, 8) for r in range(n)), rtol=1e-6),
          "async all_reduce")
    fut = tdist.all_reduce(torch.ones(2), async_op=True).get_future()
    check(same(fut.wait()[0], torch.full((2,), float(n))), "Work.get_future")


def subgroups(rank, n):
    odd = list(range(1, n, 2))
    if not odd:
        return  # torch 1.13 takes new_group([]) for the default group
    group = tdist.new_group(odd)                 # on "distkit"
    ref = tdist.new_group(odd, backend="gloo")   # the reference
    if rank not in odd:
        return
    last = odd[-1]
    a = torch.full((3,), float(rank))
    b = a.clone()
    tdist.broadcast(a, last, group=group)        # a global rank, as torch takes it
    tdist.broadcast(b, last, group=ref)
    check(same(a, b) and same(a, torch.full((3,), float(last))), "subgroup broadcast")
    a = torch.full((3,), float(rank))
    tdist.all_reduce(a, group=group)
    check(same(a, torch.full((3,), float(sum(odd)))), "subgroup all_reduce")
    check(tdist.get_rank(group) == odd.index(rank) and tdist.get_world_size(group) == len(odd),
          "subgroup rank and size")


def ddp(gloo, rank, n):
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))
    mine = DDP(base)                                   # the default group: distkit
    theirs = DDP(nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3)),
                 process_group=gloo)
    theirs.module.load_state_dict(base.state_dict())
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (mine, theirs)]
    for step in range(5):
        x = torch.randn(4, 5, generator=torch.Generator().manual_seed(10 * step + rank))
        for model, opt in zip((mine, theirs), opts):
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
    worst = max((p - q).abs().max().item() / max(q.abs().max().item(), 1e-12)
                for p, q in zip(mine.parameters(), theirs.parameters()))
    check(worst <= 1e-6, f"torch DDP on distkit vs on Gloo: {worst:.2e}")
    moved = max((p - q).abs().max().item() for p, q in
                zip(mine.module.parameters(), nn.Sequential(
                    nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3)).parameters()))
    check(moved > 0, "training moved")
    if rank == 0:
        print(f"torch DDP on distkit vs Gloo after 5 steps: {worst:.2e}", flush=True)


def sampler(gloo, rank, n):
    dataset = list(range(23))
    a = list(DistributedSampler(dataset, shuffle=True, seed=3))  # the default group's rank / size
    b = list(DistributedSampler(dataset, num_replicas=tdist.get_world_size(gloo),
                                rank=tdist.get_rank(gloo), shuffle=True, seed=3))
    check(a == b, "DistributedSampler shards")


def main():
    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if "--standalone" in sys.argv:
        import distkit.torch_backend  # noqa: F401 - registers "distkit"
        init = os.path.join(os.environ["TEST_TMPDIR"], "torch_init")
        tdist.init_process_group("distkit", init_method=f"file://{init}", rank=rank, world_size=n)
        check(dist.is_distributed() and dist.get_dist_info() == (rank, n),
              "distkit joined through torch's store")
    else:
        dist.init_dist("pytorch", backend="gloo")
    check(tdist.is_initialized() and tdist.get_backend() == "distkit", "torch's default backend")
    check((tdist.get_rank(), tdist.get_world_size()) == (rank, n), "torch's rank and size")
    gloo = tdist.new_group(backend="gloo")
    collectives(gloo, rank, n)
    subgroups(rank, n)
    ddp(gloo, rank, n)
    sampler(gloo, rank, n)
    t = torch.ones(1)
    dist.all_reduce(t)  # distkit.dist beside it
    check(t.item() == n, "distkit.dist beside torch.distributed")
    tdist.barrier()
    status = finish("torch backend checks")
    if "--standalone" in sys.argv:
        tdist.destroy_process_group()
    else:
        dist.destroy()
    return status


if __name__ == "__main__":
    sys.exit(main())
