"""torch.distributed on the "distkit" backend, beside torch's own Gloo in the
same job: every collective torch exposes gives Gloo's values (or, where
torch 1.13's Gloo lacks the op, values every rank computes itself), also
asynchronously and on a subgroup with global ranks; torch's own
DistributedDataParallel trains to Gloo DDP's parameters; DistributedSampler
gives the same shards. The backend is the C++ one (distkit._c10d): every
operation asynchronous (a 16 MiB all_reduce not done when the call returns,
done later with the right values, get_future().then chains, a collective
issued and waited for inside a then-callback), every ReduceOp (AVG,
PREMUL_SUM; on complex tensors only those and SUM, the rest refused), a
subgroup's backend held in C++ alone (as torch 2.x holds it), dtypes
distkit moves as bytes, errors that name op, group and
rank, torch's DDP with communication hooks, and a DDP bucket's all_reduce
returning before the peers joined and completing during backward. Default:
distkit.dist.init_dist initializes torch's default group on "distkit".
--standalone: torch.distributed.init_process_group("distkit") alone (distkit
joins through torch's store). --timeout: init_process_group(timeout=2 s),
and an all_reduce one rank never joins fails within the bound on the
others. --timeout-after-init-dist: the same where distkit.dist.init_dist
(timeout 30 s) joined the job first and user code then made torch's default
group itself (destroy_process_group, init_process_group(timeout=2 s)): the
2 s bound it, not init_dist's 30 s. --dead-peer: a rank exits between DDP steps, and backward on the
others raises within seconds. --exit-pending: the ranks exit with an
asynchronous all_reduce in flight whose future has a Python then-callback,
and exit with 0. With DISTKIT_TORCH_BACKEND=python, the Python fallback runs the
checks that do not need asynchronous operations."""
import datetime
import gc
import os
import sys
import time
import weakref

import torch
import torch.distributed as tdist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data.distributed import DistributedSampler

from distkit import dist, torch_backend
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
    # all_reduce_coalesced of a transposed (non-contiguous) tensor beside a
    # contiguous one: written back through the views, as Gloo does.
    mine = [data(rank, 11).view(2, 3).t(), data(rank, 12, n=4)]
    theirs = [data(rank, 11).view(2, 3).t(), data(rank, 12, n=4)]
    tdist.all_reduce_coalesced(mine)
    tdist.all_reduce_coalesced(theirs, group=gloo)
    check(all(torch.allclose(a, b, rtol=1e-6) for a, b in zip(mine, theirs)) and
          torch.allclose(mine[0], sum(data(r, 11) for r in range(n)).view(2, 3).t(), rtol=1e-6),
          "all_reduce_coalesced of a non-contiguous tensor")
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


def _refusal(call):
    """The first line of what ``call()`` raised (None: it returned)."""
    try:
        call()
    except (RuntimeError, ValueError, IndexError) as e:
        return f"{type(e).__name__}: {str(e).splitlines()[0]}"
    return None


def refusals_like_gloo(gloo, rank, n):
    """Arguments torch's Gloo refuses (before anything travels), refused
    here too with Gloo's words: all_to_all_single's split sizes as torch's
    checkSplitSizes checks them (rows, not elements; a side without splits
    divides its rows evenly), all_gather's output shapes and count."""
    z = torch.zeros
    cases = [
        # dimension 0 is 0: no split list but zeros matches it
        ("all_to_all_single of 0 rows, split sizes [1, 0, ...]",
         lambda g: tdist.all_to_all_single(z(0), z(0), [1] + [0] * (n - 1),
                                           [1] + [0] * (n - 1), group=g)),
        ("all_to_all_single, split sizes summing past dimension 0",
         lambda g: tdist.all_to_all_single(z(n, 2), z(n, 2), [2] * n, [2] * n, group=g)),
        ("all_to_all_single, one split size too many",
         lambda g: tdist.all_to_all_single(z(n + 1), z(n + 1), [1] * (n + 1), [1] * (n + 1),
                                           group=g)),
        ("all_gather into outputs of another shape (the same element count)",
         lambda g: tdist.all_gather([z(2, 3) for _ in range(n)], z(3, 2), group=g)),
        ("all_gather into one output too few",
         lambda g: tdist.all_gather([z(6) for _ in range(n - 1)], z(6), group=g)),
    ]
    if n > 1:
        # n + 1 rows of n: the elements divide by n, the rows do not
        uneven = [1] * (n - 1) + [2]
        cases += [
            ("all_to_all_single, output splits given, the input's rows not divisible",
             lambda g: tdist.all_to_all_single(z(n + 1, n), z(n + 1, n), uneven, None, group=g)),
            ("all_to_all_single, input splits given, the output's rows not divisible",
             lambda g: tdist.all_to_all_single(z(n + 1, n), z(n + 1, n), None, uneven, group=g)),
        ]
    for what, call in cases:
        theirs = _refusal(lambda: call(gloo))
        mine = _refusal(lambda: call(None))
        words = theirs.split(": ", 1)[1].split("ProcessGroupGloo::allgather: ")[-1] \
            if theirs else None
        check(theirs is not None and mine is not None and words in mine and
              mine.split(":")[0] == theirs.split(":")[0],
              f"{what}: refused with Gloo's words; Gloo: {theirs}; distkit: {mine}")
    # One side's splits given, the other even: its rows split evenly (as
    # Gloo), whatever each row holds.
    src = torch.arange(2 * n * 3, dtype=torch.float32).view(2 * n, 3) + 100 * rank
    a, b = torch.zeros(2 * n, 3), torch.zeros(2 * n, 3)
    tdist.all_to_all_single(a, src, [2] * n, None)
    tdist.all_to_all_single(b, src, [2] * n, None, group=gloo)
    check(same(a, b), "all_to_all_single, output splits given, the input even")
    a, b = torch.zeros(2 * n, 3), torch.zeros(2 * n, 3)
    tdist.all_to_all_single(a, src, None, [2] * n)
    tdist.all_to_all_single(b, src, None, [2] * n, group=gloo)
    check(same(a, b), "all_to_all_single, input splits given, the output even")
    t = torch.ones(1)
    tdist.all_reduce(t)
    check(t.item() == n, "the group works after the refusals")


def result_before_done(gloo, rank, n):
    """Work.result() before the operation finished raises, as Gloo's
    (the outputs are not written yet); after wait() it gives them."""
    big = torch.full((4 << 20,), 1.0)
    if rank == 0:
        work = tdist.all_reduce(big, async_op=True)
        early = None if work.is_completed() else _refusal(work.result)
        tdist.barrier(group=gloo)  # the others issue theirs only now
        check(n == 1 or early is not None and
              "Work needs to be completed before calling result()" in early,
              f"result() before the all_reduce finished: {early}")
    else:
        tdist.barrier(group=gloo)
        work = tdist.all_reduce(big, async_op=True)
    work.wait()
    got = work.result()
    check(len(got) == 1 and got[0] is big or torch.equal(got[0], big), "result() after wait()")
    check(big[0].item() == n and big[-1].item() == n, "the all_reduce's values")


def subgroups(rank, n, cpp):
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
    if cpp:
        held_in_cpp(rank, odd)


def one_dtype_refusals(n):
    """The base forms' input and output of two dtypes, refused before
    anything travels, naming both in torch's words (int16 travels as bytes:
    the library would have called both uint8)."""
    cases = [
        ("_all_gather_base", lambda: tdist._all_gather_base(
            torch.zeros(2 * n, dtype=torch.int16), torch.zeros(2))),
        ("_reduce_scatter_base", lambda: tdist._reduce_scatter_base(
            torch.zeros(2, dtype=torch.int16), torch.zeros(2 * n))),
    ]  # (all_to_all_single's dtypes torch itself checks first)
    for what, call in cases:
        message = _refusal(call)
        check(message is not None and "Short" in message and "Float" in message,
              f"{what} of float32 into int16: {message}")


def held_in_cpp(rank, members):
    """torch 2.x keeps a subgroup's backend in C++ alone and drops its
    Python wrapper: a backend made by the creator, as torch makes it, held
    only in C++ (torch 1.13's round-robin group over it), runs on after its
    wrapper is collected, and its distkit group is released once the
    backend is gone."""
    c10d = torch._C._distributed_c10d
    if not hasattr(c10d, "_round_robin_process_groups"):
        return  # torch 1.13's, over ProcessGroups
    store = tdist.PrefixStore("held_in_cpp/", tdist.distributed_c10d._get_default_store())
    pg = torch_backend._create(store, members.index(rank), len(members),
                               datetime.timedelta(seconds=60))
    held = c10d._round_robin_process_groups([pg])
    wrapper, group = weakref.ref(pg), weakref.ref(pg._dk_group)
    del pg
    gc.collect()
    check(wrapper() is None, "the backend's Python wrapper was collected")
    check(group() is not None, "its distkit group outlives the wrapper")
    t = torch.full((3,), float(rank))
    try:
        held.allreduce([t]).wait()
        check(same(t, torch.full((3,), float(sum(members)))),
              "all_reduce on a backend held in C++ alone")
    except RuntimeError as e:
        check(False, f"all_reduce on a backend held in C++ alone: {e}")
    del held
    gc.collect()
    getattr(torch_backend, "_release_unused_groups", lambda: None)()
    check(group() is None, "the distkit group is released once its backend is gone")


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


def backend_in_cpp():
    impl = torch_backend.implementation()
    check(impl == ("c++", None), f"the C++ backend is in use: {impl}")
    pg = tdist.distributed_c10d._get_default_group()
    check(type(pg).__name__ == "ProcessGroupDistkit" and type(pg).__module__ == "distkit._c10d",
          f"torch's default group is the extension's: {type(pg)}")


def store_held():
    # torch 2.x holds only its C++ PrefixStore around the store the default
    # group was made over, not the Python object: distkit must, or torch's
    # later calls through it fail once it is collected (new_group did on
    # torch 2.11: "fn INTERNAL ASSERT FAILED ... Not implemented").
    gc.collect()
    held = list(getattr(torch_backend, "_stores_in_use", []))
    check(any(isinstance(s, torch_backend.DistkitStore) and s._handle for s in held),
          "distkit holds the store torch's default group was made over")
    # And torch's calls through its wrapper still reach it.
    store = tdist.distributed_c10d._get_default_store()
    store.set(f"store_held/{tdist.get_rank()}", b"1")
    check(store.get(f"store_held/{tdist.get_rank()}") == b"1",
          "torch's default store answers after a collection")


def async_ops(gloo, rank, n):
    # 16 MiB, rank 0 first: the others issue theirs only after rank 0 has
    # looked, so its Work cannot have completed yet (nothing races the look).
    big = torch.full((4 << 20,), float(rank + 1))
    if rank == 0:
        work = tdist.all_reduce(big, async_op=True)
        pending = not work.is_completed()
        tdist.barrier(group=gloo)
        check(pending or n == 1, "a 16 MiB async all_reduce is not completed right after the call")
    else:
        tdist.barrier(group=gloo)
        work = tdist.all_reduce(big, async_op=True)
    # then-chains run when it completes; their values come from the result.
    doubled = work.get_future().then(lambda f: f.value()[0][:4] * 2)
    summed = doubled.then(lambda f: f.value().sum().item())
    check(work.wait() and work.is_completed(), "wait()")
    want = float(n * (n + 1) // 2)
    check(torch.equal(big[:1000], torch.full((1000,), want)) and big[-1].item() == want,
          "the 16 MiB all_reduce's values")
    check(torch.equal(doubled.wait(), torch.full((4,), 2 * want)), "get_future().then")
    check(summed.wait() == 8 * want, "a then-chain of two")
    # A then-callback that issues a collective and waits for it (PowerSGD's
    # pattern): it runs off the group's worker, so nothing deadlocks.
    x = torch.ones(3)
    nested = tdist.all_reduce(x, async_op=True).get_future().then(
        lambda f: (tdist.all_reduce(f.value()[0]), f.value()[0])[1])
    check(torch.equal(nested.wait(), torch.full((3,), float(n * n))), "a collective inside then")
    # Several in flight, completed in order; Work.wait with a timeout.
    works = [tdist.all_reduce(torch.full((1000,), float(k)), async_op=True) for k in range(4)]
    check(all(w.wait(datetime.timedelta(seconds=60)) for w in works), "four in flight")
    check(all(torch.equal(w.result()[0], torch.full((1000,), float(k * n)))
              for k, w in enumerate(works)), "Work.result() of each")
    # Every collective, asynchronously: each Work's future holds its outputs.
    outs = [torch.zeros(2) for _ in range(n)]
    w = tdist.all_gather(outs, torch.full((2,), float(rank)), async_op=True)
    got = w.get_future().wait()
    check(all(torch.equal(o, torch.full((2,), float(r))) for r, o in enumerate(outs)) and
          len(got) == n and all(g is o or torch.equal(g, o) for g, o in zip(got, outs)),
          "async all_gather's future holds the outputs")
    b = torch.full((2,), float(rank))
    tdist.broadcast(b, n - 1, async_op=True).wait()
    check(torch.equal(b, torch.full((2,), float(n - 1))), "async broadcast")
    w = tdist.barrier(async_op=True)
    w.wait()
    check(w.is_completed(), "async barrier")


def caller_state_and_lifetimes(rank, n):
    """Results copied back on distkit's worker (staged, flattened outputs)
    are written below autograd, whatever that thread's grad mode; a
    synchronous call keeps no tensor once it returns; a PREMUL_SUM refused
    at issue leaves its input as it was."""
    p = nn.Parameter(torch.full((3, 4), float(rank)).t())  # non-contiguous: staged
    with torch.no_grad():
        tdist.broadcast(p, 0)
    check(torch.equal(p.detach(), torch.zeros(4, 3)),
          "broadcast into a non-contiguous Parameter under no_grad")
    with torch.inference_mode():
        outs = [torch.zeros(2) for _ in range(n)]
        tdist.all_gather(outs, torch.full((2,), float(rank)))
    check(all(torch.equal(o, torch.full((2,), float(r))) for r, o in enumerate(outs)),
          "all_gather into inference tensors")
    a = torch.ones(3, 4, requires_grad=True)
    b = a * 2
    x = b.t()  # a view of a non-leaf that requires grad, non-contiguous
    tdist.all_reduce(x)
    # A copy recorded by autograd would have made b's node a CopySlices.
    check(type(b.grad_fn).__name__ == "MulBackward0" and
          torch.equal(x.detach(), torch.full((4, 3), 2.0 * n)),
          f"all_reduce's write-back is not recorded by autograd: {b.grad_fn}")
    for shape, what in (((1 << 16,), "contiguous"), ((256, 256), "non-contiguous")):
        t = torch.ones(shape)
        t = t if len(shape) == 1 else t.t()
        alive = weakref.ref(t)
        tdist.all_reduce(t)
        del t
        gc.collect()
        check(alive() is None, f"a {what} tensor is freed once a synchronous all_reduce returned")
    t = torch.full((3,), 5, dtype=torch.int16)
    try:
        tdist.all_reduce(t, op=tdist._make_nccl_premul_sum(2.0))
        refused = False
    except RuntimeError:
        refused = True
    check(refused and torch.equal(t, torch.full((3,), 5, dtype=torch.int16)),
          f"a refused PREMUL_SUM leaves its input: refused={refused}, {t.tolist()}")


def reductions(rank, n):
    a = data(rank, 20)
    tdist.all_reduce(a, op=tdist.ReduceOp.AVG)
    want = sum(data(r, 20) for r in range(n)) / n
    check(torch.allclose(a, want, rtol=1e-6), "all_reduce AVG")
    a = data(rank, 21)
    tdist.all_reduce(a, op=tdist._make_nccl_premul_sum(2.5))
    want = sum(data(r, 21) for r in range(n)) * 2.5
    check(torch.allclose(a, want, rtol=1e-5), "all_reduce PREMUL_SUM (a float factor)")
    a = data(rank, 22)
    tdist.all_reduce(a, op=tdist._make_nccl_premul_sum([torch.tensor([0.5])]))
    want = sum(data(r, 22) for r in range(n)) * 0.5
    check(torch.allclose(a, want, rtol=1e-5), "all_reduce PREMUL_SUM (a tensor factor)")
    mine = data(rank, 23)
    tdist.reduce(mine, 0, op=tdist._make_nccl_premul_sum(3.0))
    check(torch.allclose(mine, sum(data(r, 23) for r in range(n)) * 3.0, rtol=1e-5)
          if rank == 0 else torch.equal(mine, data(rank, 23) if n > 1 else mine),
          "reduce PREMUL_SUM: the root's sum, the others' inputs untouched")
    ins = [data(rank, 24 + r) for r in range(n)]
    out = torch.zeros(6)
    tdist.reduce_scatter(out, ins, op=tdist.ReduceOp.AVG)
    check(torch.allclose(out, sum(data(q, 24 + rank) for q in range(n)) / n, rtol=1e-6),
          "reduce_scatter AVG")
    c = torch.full((3,), complex(rank, 1), dtype=torch.complex64)
    tdist.all_reduce(c)
    check(torch.equal(c, torch.full((3,), complex(n * (n - 1) / 2, n), dtype=torch.complex64)),
          "all_reduce of complex64 (as its real pairs)")
    complex_reductions(rank, n)
    # Several tensors in one operation.
    ts = [data(rank, 30, n=3), data(rank, 31, n=5)]
    tdist.all_reduce_coalesced(ts)
    check(torch.allclose(ts[0], sum(data(r, 30, n=3) for r in range(n)), rtol=1e-6) and
          torch.allclose(ts[1], sum(data(r, 31, n=5) for r in range(n)), rtol=1e-6),
          "all_reduce_coalesced")


def complex_reductions(rank, n):
    """Complex tensors reduce as their real pairs: SUM gives the sums; an op
    that would mix the parts (PRODUCT, MAX) is refused on every rank, naming
    op and dtype, and the group goes on (torch 1.13 checks all_reduce
    alone)."""
    def mine(salt, k=3, r=rank):
        return torch.complex(data(r, salt, n=k), data(r, salt + 50, n=k))

    for name, op in (("PRODUCT", tdist.ReduceOp.PRODUCT), ("MAX", tdist.ReduceOp.MAX)):
        calls = {
            "reduce": lambda: tdist.reduce(mine(40), 0, op=op),
            "reduce_scatter": lambda: tdist.reduce_scatter(
                torch.zeros(3, dtype=torch.complex64), [mine(41) for _ in range(n)], op=op),
            "_reduce_scatter_base": lambda: tdist._reduce_scatter_base(
                torch.zeros(3, dtype=torch.complex64), mine(42, k=3 * n), op=op),
        }
        for what, call in calls.items():
            try:
                call()
                check(False, f"{what} of complex64 with {name} refused")
            except RuntimeError as e:
                check(f"ReduceOp.{name}" in str(e) and "ComplexFloat" in str(e),
                      f"{what} of complex64 with {name}: the refusal names op and dtype: {e}")
    t = torch.ones(1)
    tdist.all_reduce(t)
    check(t.item() == n, "the group works after the complex refusals")
    x = mine(43)
    tdist.reduce(x, 0)
    check(rank != 0 or torch.allclose(x, sum(mine(43, r=r) for r in range(n)), rtol=1e-5),
          "reduce SUM of complex64")
    out = torch.zeros(3, dtype=torch.complex64)
    tdist.reduce_scatter(out, [mine(44 + q) for q in range(n)])
    check(torch.allclose(out, sum(mine(44 + rank, r=r) for r in range(n)), rtol=1e-5),
          "reduce_scatter SUM of complex64")


def byte_dtypes(rank, n):
    # dtypes distkit has no code for travel as their bytes.
    mine = torch.arange(4, dtype=torch.int16) + 100 * rank
    outs = [torch.zeros(4, dtype=torch.int16) for _ in range(n)]
    tdist.all_gather(outs, mine)
    check(all(torch.equal(o, torch.arange(4, dtype=torch.int16) + 100 * r)
              for r, o in enumerate(outs)), "all_gather of int16")
    c = torch.full((2,), complex(rank, -rank), dtype=torch.complex128)
    tdist.broadcast(c, n - 1)
    check(torch.equal(c, torch.full((2,), complex(n - 1, 1 - n), dtype=torch.complex128)),
          "broadcast of complex128")
    src = (torch.arange(2 * n, dtype=torch.int16) + 10 * rank)
    dst = torch.zeros(2 * n, dtype=torch.int16)
    tdist.all_to_all_single(dst, src, [2] * n, [2] * n)
    want = torch.cat([torch.arange(2 * rank, 2 * rank + 2, dtype=torch.int16) + 10 * q
                      for q in range(n)])
    check(torch.equal(dst, want), "all_to_all_single of int16 with splits")
    # all_gather_coalesced (torch takes one dtype; they travel as bytes).
    ins = [torch.full((2,), rank, dtype=torch.int16), torch.full((3,), -rank, dtype=torch.int16)]
    lists = [[torch.zeros(2, dtype=torch.int16), torch.zeros(3, dtype=torch.int16)]
             for _ in range(n)]
    tdist.all_gather_coalesced(lists, ins)
    check(all(torch.equal(lst[0], torch.full((2,), r, dtype=torch.int16)) and
              torch.equal(lst[1], torch.full((3,), -r, dtype=torch.int16))
              for r, lst in enumerate(lists)), "all_gather_coalesced")


def errors(rank, n):
    group_name = tdist.distributed_c10d._get_default_group().group_name
    try:
        tdist.all_reduce(torch.zeros(3, dtype=torch.int16))
        check(False, "all_reduce of int16 refused")
    except RuntimeError as e:
        check(f"allreduce on group '{group_name}' (rank {rank} of {n})" in str(e) and
              "cannot reduce Short" in str(e), f"the refusal names op, group and rank: {e}")
    if n > 1:
        # Different sizes on different ranks: every rank fails, naming the op
        # (at the call when the ranks have disagreed already, else at wait).
        mismatched = torch.zeros(2 + rank)
        alive = weakref.ref(mismatched)
        try:
            tdist.all_reduce(mismatched, async_op=True).wait()
            check(False, "mismatched all_reduce failed")
        except RuntimeError as e:
            check("all_reduce" in str(e) and "rank" in str(e) and group_name in str(e),
                  f"the failure names op, group and rank: {e}")
            e = None
        del mismatched
        gc.collect()
        check(alive() is None, "a failed operation's tensor is freed once its wait returned")
        t = torch.ones(1)
        tdist.all_reduce(t)  # the group goes on
        check(t.item() == n, "the group works after a refused operation")
    try:
        tdist.recv(torch.zeros(1))  # any source
        check(False, "recv from any source refused")
    except RuntimeError as e:
        check("any source" in str(e) and group_name in str(e), f"recv from any source: {e}")


def ddp_hooks(gloo, rank, n):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    for name, hook, tol in (("allreduce_hook", default_hooks.allreduce_hook, 1e-6),
                            ("fp16_compress_hook", default_hooks.fp16_compress_hook, 2e-3)):
        torch.manual_seed(1)
        net = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))
        mine, theirs = DDP(net), DDP(nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3)),
                                     process_group=gloo)
        theirs.module.load_state_dict(net.state_dict())
        mine.register_comm_hook(None, hook)
        theirs.register_comm_hook(gloo, hook)
        opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (mine, theirs)]
        for step in range(3):
            x = torch.randn(4, 5, generator=torch.Generator().manual_seed(10 * step + rank))
            for model, opt in zip((mine, theirs), opts):
                opt.zero_grad()
                model(x).pow(2).mean().backward()
                opt.step()
        worst = max((p - q).abs().max().item() for p, q in zip(mine.parameters(),
                                                                 theirs.parameters()))
        check(worst <= tol, f"DDP with {name} on distkit vs on Gloo: {worst:.2e}")


def ddp_overlap(rank, n):
    """A DDP bucket's all_reduce returns before the other ranks joined it and
    completes while backward still runs. torch 1.13's DDP takes one bucket
    in its first step and rebuilds them by bucket_cap_mb in the second's
    forward; in that second step rank 0's hook publishes that its first
    all_reduce call returned, and every other rank starts its backward only
    then (a backend whose all_reduce waited for the peers would hang here,
    within the harness's bound); rank 0's hook on the first layer's weight
    (computed last) waits for that bucket's future, so it must complete
    during backward."""
    if n == 1:
        return
    store = tdist.distributed_c10d._get_default_store()
    torch.manual_seed(2)
    # Rebuilt buckets: the last layer's (ready first) and the first layer's.
    net = nn.Sequential(nn.Linear(512, 1024), nn.Tanh(), nn.Linear(1024, 512))
    model = DDP(net, bucket_cap_mb=1)
    first, done_during_backward, step = [], [], [0]

    def hook(state, bucket):
        fut = tdist.all_reduce(bucket.buffer(), async_op=True).get_future()
        if not first:
            first.append(fut)
            if rank == 0 and step[0] == 1:
                store.set("overlap/returned", "1")
        return fut.then(lambda f: f.value()[0].div_(n))

    model.register_comm_hook(None, hook)

    def first_layer_grad(grad):
        if step[0] == 1:
            deadline = time.monotonic() + 60
            while first and not first[0].done() and time.monotonic() < deadline:
                time.sleep(0.0005)
            done_during_backward.append(bool(first) and first[0].done())
        return grad

    net[0].weight.register_hook(first_layer_grad)
    x = torch.randn(8, 512, generator=torch.Generator().manual_seed(rank))
    for step[0] in range(2):
        first.clear()
        out = model(x).pow(2).mean()  # the second step's rebuilds the buckets (collective)
        if step[0] == 1 and rank != 0:
            store.wait(["overlap/returned"], datetime.timedelta(seconds=60))
        out.backward()
    check(done_during_backward == [True],
          f"bucket 0's all_reduce returned before the peers joined and completed during "
          f"backward ({done_during_backward})")
    if rank == 0:
        print("DDP overlap: the first bucket's all_reduce completed during backward", flush=True)


def start_together(rank, n):
    """Waits until every rank is here (files in TEST_TMPDIR): a 2 s timeout
    also bounds torch's joining, and on a loaded machine the ranks' imports of
    torch end seconds apart, which is not what the timeout test checks."""
    here = os.path.join(os.environ["TEST_TMPDIR"], "started")
    os.makedirs(here, exist_ok=True)
    open(os.path.join(here, str(rank)), "w").close()
    deadline = time.monotonic() + 120
    while len(os.listdir(here)) < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"rank {rank}: only {os.listdir(here)} of {n} ranks started")
        time.sleep(0.01)


def timeout_check(rank, n):
    """init_process_group(timeout=2 s): an all_reduce that rank n - 1 never
    joins fails on the others within the bound (plus the late-rank
    diagnosis), naming the op; rank n - 1 leaves once they report."""
    store = tdist.distributed_c10d._get_default_store()
    t = torch.ones(1)
    tdist.all_reduce(t)
    check(t.item() == n, "an all_reduce before the timeout")
    if rank != n - 1:
        start = time.monotonic()
        try:
            tdist.all_reduce(torch.ones(1))
            check(False, "the all_reduce no rank joined timed out")
        except RuntimeError as e:
            took = time.monotonic() - start
            check("all_reduce" in str(e) and ("DEADLINE" in str(e) or "did not" in str(e) or
                                              "timed out" in str(e) or "timeout" in str(e)),
                  f"the timeout names the op: {e}")
            check(1.5 <= took <= 20, f"within the group's 2 s bound (plus diagnosis): {took:.1f} s")
        store.add("timeout/reported", 1)
    else:
        store.wait(["timeout/reported"], datetime.timedelta(seconds=60))
        while int(store.add("timeout/reported", 0)) < n - 1:
            time.sleep(0.01)


def subgroup_timeout(rank, n):
    """new_group(timeout=3 s) under the default group's 30 minutes: an
    all_reduce on the subgroup that rank n - 1 skips fails on the others
    within the subgroup's bound, naming the op; the default group goes on."""
    tdist.barrier()  # the creation, too, is bounded by the 3 s: start it together
    sub = tdist.new_group(list(range(n)), timeout=datetime.timedelta(seconds=3))
    t = torch.ones(1)
    tdist.all_reduce(t, group=sub)
    check(t.item() == n, "an all_reduce on the subgroup with its own timeout")
    if n == 1:
        return
    if rank != n - 1:
        start = time.monotonic()
        try:
            tdist.all_reduce(torch.ones(1), group=sub)
            check(False, "the subgroup's all_reduce rank n - 1 skipped timed out")
        except RuntimeError as e:
            took = time.monotonic() - start
            check("all_reduce" in str(e), f"the subgroup's timeout names the op: {e}")
            check(took <= 20, f"within the subgroup's 3 s bound (plus diagnosis): {took:.1f} s")
    # The default group waits for them (rank n - 1 keeps its handle until
    # then: a destroyed peer would end their wait another way).
    tdist.barrier()


def dead_peer(rank, n):
    """Rank n - 1 exits after two DDP steps; in the next step every other
    rank's bucket all_reduce fails inside torch's reducer (its peer is
    gone), and backward raises a RuntimeError naming it within seconds:
    never a hang."""
    torch.manual_seed(3)
    model = DDP(nn.Sequential(nn.Linear(64, 256), nn.Tanh(), nn.Linear(256, 8)))
    x = torch.randn(4, 64, generator=torch.Generator().manual_seed(rank))
    for _ in range(2):
        model(x).pow(2).mean().backward()
    tdist.barrier()
    if rank == n - 1:
        os._exit(0)  # noqa: SLF001 - dies without leaving the group
    start = time.monotonic()
    try:
        model(x).pow(2).mean().backward()
        check(False, "backward with a dead peer raised")
    except RuntimeError as e:
        took = time.monotonic() - start
        check("all_reduce" in str(e) and f"rank {n - 1}" in str(e),
              f"the error names the op and the dead rank: {e}")
        check(took < 20, f"within seconds: {took:.1f} s")
        if rank == 0:
            print(f"backward with a dead peer, after {took:.2f} s: {e}", flush=True)


def main():
    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if "--timeout" in sys.argv:
        start_together(rank, n)
        init = os.path.join(os.environ["TEST_TMPDIR"], "torch_init")
        tdist.init_process_group("distkit", init_method=f"file://{init}", rank=rank, world_size=n,
                                 timeout=datetime.timedelta(seconds=2))
        backend_in_cpp()
        timeout_check(rank, n)
        return finish("torch backend timeout")
    if "--timeout-after-init-dist" in sys.argv:
        dist.init_dist("pytorch", backend="gloo", timeout=30)
        tdist.destroy_process_group()  # init_dist made it; this program makes its own
        dist.barrier()  # together: the 2 s also bound the group's creation
        init = os.path.join(os.environ["TEST_TMPDIR"], "torch_init")
        tdist.init_process_group("distkit", init_method=f"file://{init}", rank=rank, world_size=n,
                                 timeout=datetime.timedelta(seconds=2))
        backend_in_cpp()
        timeout_check(rank, n)
        t = torch.ones(1)
        dist.all_reduce(t)  # distkit's own default group goes on
        check(t.item() == n, "distkit's default group after torch's timed out")
        return finish("torch backend timeout after init_dist")
    if "--exit-pending" in sys.argv:
        # The process ends with an asynchronous all_reduce in flight whose
        # future has a Python then-callback: exit waits for it (the pool
        # would otherwise run it while the interpreter finalizes, and the
        # process abort), so every rank exits with 0.
        init = os.path.join(os.environ["TEST_TMPDIR"], "torch_init")
        tdist.init_process_group("distkit", init_method=f"file://{init}", rank=rank, world_size=n)
        backend_in_cpp()
        ran = []
        work = tdist.all_reduce(torch.ones(32 << 20), async_op=True)
        work.get_future().then(lambda f: ran.append(f.value()[0][0].item()))
        return finish("torch backend exit with an operation in flight")
    if "--dead-peer" in sys.argv:
        init = os.path.join(os.environ["TEST_TMPDIR"], "torch_init")
        tdist.init_process_group("distkit", init_method=f"file://{init}", rank=rank, world_size=n)
        backend_in_cpp()
        dead_peer(rank, n)
        return finish("torch backend dead peer")
    if "--standalone" in sys.argv:
        init = os.path.join(os.environ["TEST_TMPDIR"], "torch_init")
        tdist.init_process_group("distkit", init_method=f"file://{init}", rank=rank, world_size=n)
        check(dist.is_distributed() and dist.get_dist_info() == (rank, n),
              "distkit joined through torch's store")
    else:
        dist.init_dist("pytorch", backend="gloo")
    check(tdist.is_initialized() and tdist.get_backend() == "distkit", "torch's default backend")
    check((tdist.get_rank(), tdist.get_world_size()) == (rank, n), "torch's rank and size")
    cpp = os.environ.get("DISTKIT_TORCH_BACKEND") != "python"
    if cpp:
        backend_in_cpp()
    else:
        impl, why = torch_backend.implementation()
        check(impl == "python" and "DISTKIT_TORCH_BACKEND=python" in why,
              f"the Python fallback, saying why: {impl}, {why}")
    if "--standalone" not in sys.argv:
        store_held()
    gloo = tdist.new_group(backend="gloo")
    collectives(gloo, rank, n)
    refusals_like_gloo(gloo, rank, n)
    if cpp:
        one_dtype_refusals(n)
    if cpp:  # the fallback completes every operation before it returns
        async_ops(gloo, rank, n)
        result_before_done(gloo, rank, n)
        caller_state_and_lifetimes(rank, n)
        reductions(rank, n)
        byte_dtypes(rank, n)
        errors(rank, n)
    subgroups(rank, n, cpp)
    subgroup_timeout(rank, n)
    ddp(gloo, rank, n)
    if cpp:
        ddp_hooks(gloo, rank, n)
        ddp_overlap(rank, n)
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
