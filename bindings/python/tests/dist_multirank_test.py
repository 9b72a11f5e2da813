"""distkit.dist across a real job (world sizes 1-4), with results compared to
torch.distributed (Gloo, Debian's python3-torch) on the same inputs in the same
processes. torch's rendezvous goes through a FileStore in the test's temporary
directory (distrun's store holds MASTER_PORT, and no other port is sure to be free
while other tests run).

--without-torch-gloo (ranks on real hosts, testing/netns): torch's Gloo finds its
address by the hostname, which no host there resolves, and GLOO_SOCKET_IFNAME would
choose distkit's address too; the reference is then computed on each rank from
every rank's input, gathered as pickled objects (the object path, not the tensor
collectives under test)."""
import datetime
import os
import sys
import time
import traceback

import numpy as np
import torch
import torch.distributed as tdist

from distkit import dist, distributed, errors, torch_backend
from testing.python.rank_check import check, finish


def torch_init_method():
    """A FileStore path every rank of this job shares and no other job uses."""
    tmp = os.environ.get("TEST_TMPDIR", "/tmp")
    return f"file://{tmp}/torch_store_{os.environ['MASTER_PORT']}"


class GatheredReference:
    """torch.distributed's calls used below as the reference, computed here
    from every rank's input (gathered with dist.all_gather_object) in rank
    order: sums of the same integers and floats torch's Gloo adds."""
    ReduceOp = tdist.ReduceOp
    _fold = {tdist.ReduceOp.SUM: torch.add, tdist.ReduceOp.PRODUCT: torch.mul,
             tdist.ReduceOp.MIN: torch.minimum, tdist.ReduceOp.MAX: torch.maximum,
             tdist.ReduceOp.BAND: torch.bitwise_and, tdist.ReduceOp.BOR: torch.bitwise_or,
             tdist.ReduceOp.BXOR: torch.bitwise_xor}

    @staticmethod
    def _inputs(t):
        return dist.all_gather_object(t.clone())

    def all_reduce(self, t, op=tdist.ReduceOp.SUM):
        parts = self._inputs(t)
        acc = parts[0].clone()
        for p in parts[1:]:
            acc = self._fold[op](acc, p)
        t.copy_(acc)

    def reduce(self, t, dst, op=tdist.ReduceOp.SUM):
        acc = t.clone()
        self.all_reduce(acc, op)
        if dist.get_rank() == dst:
            t.copy_(acc)

    def all_gather(self, out, t):
        for o, p in zip(out, self._inputs(t)):
            o.copy_(p)

    def broadcast(self, t, src):
        t.copy_(self._inputs(t)[src])

    def destroy_process_group(self):
        pass


def main():
    global tdist
    with_torch = "--without-torch-gloo" not in sys.argv
    if with_torch:
        # torch.distributed on its own Gloo first (the reference the calls
        # below are compared with), so init_dist leaves torch's default
        # group alone.
        tdist.init_process_group(
            "gloo", init_method=torch_init_method(),
            rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
    # connect_timeout is this rank's own bound: seconds here, a timedelta on
    # the odd ranks, so one job takes both forms.
    connect_timeout = 60 if int(os.environ["RANK"]) % 2 == 0 else datetime.timedelta(seconds=60)
    dist.init_dist("pytorch", backend="gloo", timeout=60, connect_timeout=connect_timeout)
    rank, n = dist.get_dist_info()
    check((rank, n) == (int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])), "dist info")
    if with_torch:
        check(dist.get_backend() == "gloo" and dist.is_distributed(), "backend")
        check(tdist.get_backend() == "gloo", "torch's own default group is kept")
    else:  # init_dist put torch.distributed on distkit's backend
        check(dist.get_backend() == "distkit" and dist.transport() == "gloo"
              and dist.is_distributed(), f"backend {dist.get_backend()} {dist.transport()}")
        tdist = GatheredReference()
    check(dist.get_comm_device() == torch.device("cpu"), "comm device")

    # all_reduce: every op on int64 and float32, beside torch.distributed.
    torch_ops = {"sum": tdist.ReduceOp.SUM, "product": tdist.ReduceOp.PRODUCT,
                 "min": tdist.ReduceOp.MIN, "max": tdist.ReduceOp.MAX,
                 "band": tdist.ReduceOp.BAND, "bor": tdist.ReduceOp.BOR, "bxor": tdist.ReduceOp.BXOR}
    gen = torch.Generator().manual_seed(1234 + rank)
    for op, top in torch_ops.items():
        dtypes = [torch.int64, torch.int32] if op in ("band", "bor", "bxor") else [torch.int64, torch.float32, torch.float64]
        for dtype in dtypes:
            for numel in (3, 1000):
                x = torch.randint(-3, 4, (numel,), generator=gen).to(dtype)
                ours, theirs = x.clone(), x.clone()
                dist.all_reduce(ours, op.upper())
                tdist.all_reduce(theirs, top)
                check(torch.equal(ours, theirs), f"all_reduce {op} {dtype} {numel}")
    # mean: mmengine's int truncation, floats divided.
    m = torch.tensor([1 + 2 * rank, 2 + 2 * rank], dtype=torch.int64)
    dist.all_reduce(m, "mean")
    s = sum(1 + 2 * r for r in range(n))
    check(m.tolist() == [s // n, (s + n) // n], f"int mean {m.tolist()}")
    if n == 2:
        check(m.tolist() == [2, 3], "mmengine's [1,2]/[3,4] -> [2,3]")
    f = torch.tensor([float(rank)])
    dist.all_reduce(f, "mean")
    check(abs(f.item() - (n - 1) / 2) < 1e-6, "float mean")
    # half types and bool.
    x = torch.arange(8, dtype=torch.float16) + rank
    ours, theirs = x.clone(), x.clone()
    dist.all_reduce(ours)
    tdist.all_reduce(theirs)
    check(torch.equal(ours, theirs), "all_reduce float16")
    # torch 1.13's Gloo has no bfloat16 all_reduce ("Invalid scalar type"):
    # compare with the sum computed here instead.
    x = torch.arange(8, dtype=torch.bfloat16) + rank
    dist.all_reduce(x)
    want = (torch.arange(8) * n + n * (n - 1) // 2).to(torch.bfloat16)
    check(torch.equal(x, want), "all_reduce bfloat16")
    b = torch.tensor([rank == 0, False, True])
    dist.all_reduce(b, "sum")
    check(b.tolist() == [True, False, True], f"bool sum {b.tolist()}")
    b = torch.tensor([rank == 0, True])
    dist.all_reduce(b, "min")
    check(b.tolist() == [n == 1, True], f"bool min {b.tolist()}")
    # numpy arrays, in place.
    a = np.full(5, rank, dtype=np.float64)
    dist.all_reduce(a)
    check(np.all(a == n * (n - 1) / 2), "numpy all_reduce")
    parts = dist.all_gather(np.full(2, rank, dtype=np.int32))
    check(len(parts) == n and all(np.array_equal(x, np.full(2, r)) for r, x in enumerate(parts)),
          "numpy all_gather")
    # all_gather / gather / broadcast beside torch.
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3) + 10 * rank
    ours = dist.all_gather(x)
    theirs = [torch.empty_like(x) for _ in range(n)]
    tdist.all_gather(theirs, x)
    check(len(ours) == n and all(torch.equal(a, b) for a, b in zip(ours, theirs)), "all_gather")
    g = dist.gather(x, dst=n - 1)
    if rank == n - 1:
        check(len(g) == n and all(torch.equal(a, b) for a, b in zip(g, theirs)), "gather on dst")
    else:
        check(g == [], "gather elsewhere is []")
    y = torch.arange(4) * (rank + 1)
    ty = y.clone()
    dist.broadcast(y, src=n - 1)
    tdist.broadcast(ty, src=n - 1)
    check(torch.equal(y, ty), "broadcast")
    # reduce to the last rank, beside torch; the others keep their data.
    for op, top in (("sum", tdist.ReduceOp.SUM), ("max", tdist.ReduceOp.MAX)):
        z = torch.arange(5, dtype=torch.float64) * (rank + 1)
        ours, theirs = z.clone(), z.clone()
        dist.reduce(ours, dst=n - 1, op=op)
        tdist.reduce(theirs, dst=n - 1, op=top)
        check(torch.equal(ours, theirs) if rank == n - 1 else torch.equal(ours, z), f"reduce {op}")
    # sync_random_seed: the same everywhere.
    seed = dist.sync_random_seed()
    check(len(set(dist.all_gather_object(seed))) == 1, "sync_random_seed")
    # The seed's form on rank 0 and the drawn form elsewhere meet in one
    # broadcast (it was int64 against int32: the ranks disagreed).
    seed = (dist.sync_random_seed(42, device="cpu") if rank == 0
            else dist.sync_random_seed(seed=None, device="cpu"))
    check(seed == 42, f"rank 0's given seed reaches every form: {seed}")
    seed = dist.sync_random_seed(-5, device="cpu")
    check(seed == -5, f"a negative seed comes back as given (an int32's .item()): {seed}")
    if n > 1:
        # A refusal on one rank before the call (a result that cannot be
        # pickled, an empty dict) fails the call on every rank, and the group
        # stays in step (the others were left in the call, then paired it
        # with the next collective).
        for what, call in (
                ("collect_results",
                 lambda: dist.collect_results([lambda: 0] if rank == n - 1 else [rank], n)),
                ("all_reduce_dict",
                 lambda: dist.all_reduce_dict({} if rank == n - 1 else {"a": torch.ones(2)})),
                ("collect_results with a tmpdir",
                 lambda: dist.collect_results([lambda: 0] if rank == n - 1 else [rank], n, "cpu",
                                              os.path.join(os.environ["TEST_TMPDIR"], "refused")))):
            try:
                call()
                check(False, f"{what} refused on every rank")
            except Exception as e:  # the refusing rank's own error, or the told disagreement
                check(rank == n - 1 or "refused its call" in str(e),
                      f"{what}: the others hear the refusal: {e}")
            t = torch.ones(1)
            dist.all_reduce(t, op="sum")
            check(t.item() == n, f"the group in step after a refused {what}")
    # objects.
    objs = [{"rank": rank}, "x" * (rank * 100 + 1), None] if rank == 0 else [None]
    dist.broadcast_object_list(objs, src=0)
    check(objs == [{"rank": 0}, "x", None], f"broadcast_object_list {objs!r:.80}")
    gathered = dist.all_gather_object({"r": rank, "pad": "y" * (rank * 333)})
    check([o["r"] for o in gathered] == list(range(n)), "all_gather_object")
    got = dist.gather_object(rank * 2, dst=0)
    check(got == [2 * r for r in range(n)] if rank == 0 else got is None, "gather_object")
    # all_reduce_dict: values replaced by new tensors.
    d = {"b": torch.tensor([float(rank)]), "a": torch.ones(2, 2) * rank}
    original = d["a"]
    dist.all_reduce_dict(d, op="mean")
    check(torch.allclose(d["a"], torch.full((2, 2), (n - 1) / 2)), "all_reduce_dict")
    check(n == 1 or d["a"] is not original, "all_reduce_dict replaces the values")
    # all_reduce_params: coalesced (with buckets) and one by one, beside torch.
    for coalesce, bucket in ((True, -1), (True, 1), (False, -1)):
        # Also a channels_last conv weight and a transposed one (mmengine
        # flattens any layout; they must not be refused).
        params = [torch.nn.Parameter(torch.randn(300000, generator=gen)),
                  torch.nn.Parameter(torch.randn(7, generator=gen).double()),
                  torch.nn.Parameter(torch.randn(4, 3, 5, 5, generator=gen).to(
                      memory_format=torch.channels_last)),
                  torch.nn.Parameter(torch.randn(6, 9, generator=gen).t())]
        expected = [p.data.clone() for p in params]
        for e in expected:
            tdist.all_reduce(e)
        dist.all_reduce_params(iter(params), coalesce=coalesce, bucket_size_mb=bucket)
        # Summation order differs from torch's ring (distkit's same-host path
        # folds in rank order): float32 rounding, so an absolute tolerance too.
        check(all(torch.allclose(p.data, e, rtol=1e-5, atol=1e-5) for p, e in zip(params, expected)),
              f"all_reduce_params coalesce={coalesce} bucket={bucket}")
    # collect_results: round robin, padded with None.
    size = 10
    part = [f"r{i}" if i < size else None for i in range(rank, -(-size // n) * n, n)]
    want = [f"r{i}" for i in range(size)]
    tmp = os.path.join(os.environ["TEST_TMPDIR"], "collect")
    for kwargs in ({}, {"tmpdir": tmp}, {"device": "gpu"}):
        res = dist.collect_results(part, size, **kwargs)
        check(res == want if rank == 0 else res is None, f"collect_results {kwargs}")
        dist.barrier()
    check(not os.path.exists(tmp), "the supplied tmpdir is removed")
    # local group.
    per_node = 2 if n % 2 == 0 else n
    dist.init_local_group(rank // per_node, per_node)
    check((dist.get_local_rank(), dist.get_local_size()) == (rank % per_node, per_node), "local group")
    # modelopt.
    check(distributed.backend() == "torch" and distributed.size() == n and distributed.rank() == rank,
          "modelopt basics")
    state = distributed.ParallelState()
    check(state.data_parallel_group.world_size() == n and state.tensor_parallel_group.rank() == -1,
          "ParallelState")
    evens = dist.new_group(list(range(0, n, 2)))
    if rank % 2 == 0:
        check(dist.get_comm_device(evens) == torch.device("cpu"), "a subgroup's comm device")
        mixed = distributed.ParallelState(evens, -1, None)
        check((mixed.data_parallel_group.rank(), mixed.data_parallel_group.world_size(),
               mixed.expert_model_parallel_group.world_size()) == (rank // 2, (n + 1) // 2, n),
              "ParallelState over a subgroup, unused and the world")
        check(repr(mixed).endswith(
            f"tensor_parallel_group: group: -1, initialized: False, world size: -1, "
            f"expert_model_parallel_group: group: None, initialized: True, world size: {n}"),
            f"ParallelState text {mixed!r}")
        check(repr(mixed.tensor_parallel_group) == "group: -1, initialized: False, world size: -1",
              "DistributedProcessGroup text")
    # new_group(timeout=): the subgroup's own bound under the world's 60 s.
    dist.barrier()  # the creation, too, is bounded by the 3 s: start it together
    quick = dist.new_group(list(range(n)), timeout=datetime.timedelta(seconds=3))
    t = torch.ones(1)
    dist.all_reduce(t, group=quick)
    check(t.item() == n, "an all_reduce on a subgroup with its own timeout")
    if rank != n - 1 and n > 1:
        start = time.monotonic()
        try:
            dist.all_reduce(torch.ones(1), group=quick)
            check(False, "the subgroup's all_reduce the last rank skipped timed out")
        except errors.DeadlineExceededError as e:
            took = time.monotonic() - start
            check("all_reduce" in str(e) and took <= 20,
                  f"within the subgroup's 3 s bound, naming the op: {took:.1f} s, {e}")
    dist.barrier()  # the last rank keeps its handle until the others failed
    try:
        dist.new_group(list(range(n)), timeout=0)
        check(False, "a zero timeout is refused")
    except ValueError as e:
        check("timeout" in str(e), f"the refusal names the timeout: {e}")
    check(distributed.DistributedProcessGroup.get_dist_syncd_obj(
        rank, [state.data_parallel_group, state.tensor_parallel_group], max) == n - 1,
          "get_dist_syncd_obj")
    check(distributed.master_only(lambda: "from master")() == "from master", "modelopt master_only")
    check(distributed.allreduce(rank) == n * (n - 1) // 2, "modelopt allreduce")
    # Errors: different sizes on different ranks fail on every rank, as a ValueError.
    if n > 1:
        try:
            dist.all_reduce(torch.zeros(1 + rank % 2))
            check(False, "mismatch raised")
        except errors.InvalidArgumentError as e:
            check("ranks disagree" in str(e) and isinstance(e, ValueError) and e.code == 3,
                  f"mismatch message: {e}")
    # Blocking calls release the GIL: a Python thread keeps running while this
    # rank waits in an all_reduce that rank 0 joins a second late. The others
    # start their clock, then say so in the store; rank 0 waits for every one
    # of them before its second, so each waits at least that second however
    # late it got here (a fixed head start lost to a rank descheduled after
    # the barrier).
    if n > 1:
        import threading
        dist.barrier()
        store = torch_backend.job_store(prefix="dist_multirank_test/gil/")
        t = torch.zeros(1)
        if rank == 0:
            store.wait([f"timing/{r}" for r in range(1, n)], datetime.timedelta(seconds=60))
            time.sleep(1.0)
            dist.all_reduce(t)
        else:
            counter, done = [0], threading.Event()

            def spin():
                while not done.is_set():
                    counter[0] += 1

            spinner = threading.Thread(target=spin)
            spinner.start()
            start = time.monotonic()
            store.set(f"timing/{rank}", "1")
            dist.all_reduce(t)
            waited = time.monotonic() - start
            done.set()
            spinner.join()
            check(waited > 0.5 and counter[0] > 100000,
                  f"GIL released while blocked (waited {waited:.2f}s, {counter[0]} spins)")
    dist.barrier()
    tdist.destroy_process_group()
    dist.destroy()
    return finish("python checks")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(1)
