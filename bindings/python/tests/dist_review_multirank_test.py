"""distkit.dist and distkit.distributed on what a review found, at world sizes
1-4: signed seeds, mmdet's to_float, non-contiguous, complex and numpy data,
collect_results' and all_reduce_dict's call forms, and modelopt's groups made
locally (on some ranks only, before torch.distributed is initialized, or on a
group this rank is not in).

torch.distributed is initialized first by this program (Gloo, a FileStore in the
test's temporary directory), as user code does, so distkit has not joined the
job while the modelopt groups are made; init_dist joins it after."""
import datetime
import gc
import os
import pathlib
import sys
import threading
import time
import traceback

import numpy as np
import torch
import torch.distributed as tdist

from distkit import dist, distributed
from testing.python.rank_check import check, finish


def expect_error(what, call, kind=Exception, text=""):
    """``call`` raises ``kind`` (with ``text`` in its message)."""
    try:
        call()
        check(False, f"{what}: no error")
    except kind as e:
        check(text in str(e), f"{what}: {type(e).__name__}: {e}")


def in_step(what, n):
    """The group still pairs collectives after ``what``."""
    t = torch.ones(1)
    dist.all_reduce(t)
    check(t.item() == n, f"the group in step after {what}")


def modelopt_groups_before_joining(rank, n):
    """Items 8-10: modelopt's constructors only store the group; rank and
    size are read when asked, from torch where torch owns the group."""
    early = distributed.ParallelState()  # before torch.distributed is initialized
    check((early.data_parallel_group.rank(), early.data_parallel_group.world_size()) == (-1, -1),
          "a ParallelState before init: -1 / -1")
    tdist.init_process_group(
        "gloo", init_method=f"file://{os.environ['TEST_TMPDIR']}/torch_store",
        rank=rank, world_size=n, timeout=datetime.timedelta(seconds=60))
    dp = early.data_parallel_group
    check((dp.is_initialized(), dp.rank(), dp.world_size()) == (True, rank, n),
          f"the early ParallelState reads the job at call time: {dp.rank()} / {dp.world_size()}")
    check(repr(early).startswith(f"data_parallel_group: group: None, initialized: True, "
                                 f"world size: {n}, "), f"its text: {early!r}")

    # Only rank 0 makes a group and asks it: nothing collective may happen
    # (the others wait in torch's own barrier). A join would hang rank 0.
    if rank == 0:
        answers = []

        def ask():
            made = distributed.DistributedProcessGroup()
            state = distributed.ParallelState()
            answers.append((made.rank(), made.world_size(), repr(made),
                            state.data_parallel_group.world_size()))
        asking = threading.Thread(target=ask, daemon=True)
        asking.start()
        asking.join(20)
        if asking.is_alive():
            check(False, "DistributedProcessGroup() on rank 0 alone hangs (collective)")
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(1)
        check(answers == [(0, n, f"group: None, initialized: True, world size: {n}", n)],
              f"DistributedProcessGroup() on rank 0 alone: {answers}")
    tdist.barrier()

    # A group this rank is not in (torch's NON_GROUP_MEMBER): made, -1 / -1.
    only_first = tdist.new_group([0])
    made = distributed.DistributedProcessGroup(only_first)
    want = (0, 1) if rank == 0 else (-1, -1)
    check((made.is_initialized(), made.rank(), made.world_size()) == (True,) + want,
          f"DistributedProcessGroup of torch.new_group([0]): {made.rank()} / {made.world_size()}")
    state = distributed.ParallelState(None, only_first)
    check((state.tensor_parallel_group.rank(), state.data_parallel_group.rank()) == (want[0], rank),
          "ParallelState with a group this rank is not in")
    check(isinstance(repr(state), str), "its text")


def seeds(rank, n):
    """Item 1: rank 0's seed as an int32's .item(), signed."""
    check(dist.sync_random_seed(-5) == -5, "sync_random_seed(-5) is -5")
    check(dist.sync_random_seed(seed=-(2**31), device="cpu") == -(2**31), "the int32 minimum")
    got = dist.sync_random_seed(-7 if rank == 0 else 3)
    check(got == -7, f"rank 0's negative seed on every rank: {got}")
    if n == 1:
        check(dist.sync_random_seed(2**31 + 5) == 2**31 + 5, "world size 1 returns the seed")
    else:
        # mmdet's int32 torch.tensor refuses it on rank 0; the others are told.
        expect_error("a seed past int32", lambda: dist.sync_random_seed(
            2**31 + 5 if rank == 0 else 1), text="overflow" if rank == 0 else "refused")
        in_step("a seed past int32", n)


def reduce_dicts(rank, n):
    """Items 2 and 7: mmdet's to_float results are float32; mmengine's form
    (data=) and to_float=False keep each value's dtype."""
    d = dist.all_reduce_dict({"a": torch.tensor([rank + 1]), "h": torch.tensor([1.0 + rank],
                                                                             dtype=torch.float64)})
    if n == 1:
        check(d["a"].dtype == torch.int64 and d["a"].item() == 1, "world size 1: unchanged")
    else:
        check(d["a"].dtype == torch.float32 and d["a"].item() == (n + 1) / 2
              and d["h"].dtype == torch.float32, f"to_float: float32 means {d}")
    d = dist.all_reduce_dict(py_dict={"a": torch.tensor([rank + 1])}, op="sum")
    check(d["a"].item() == n * (n + 1) // 2, f"py_dict= {d}")
    big = {"n": torch.tensor([16777217 if rank == 0 else 0])}
    dist.all_reduce_dict(data=big, op="sum")
    check(big["n"].dtype == torch.int64 and big["n"].item() == 16777217,
          f"mmengine's form (data=) keeps int64 exact: {big}")
    d = dist.all_reduce_dict({"n": torch.tensor([16777217 if rank == 0 else 0])}, "sum",
                             to_float=False)
    check(d["n"].dtype == torch.int64 and d["n"].item() == 16777217, f"to_float=False: {d}")
    d = dist.all_reduce_dict(data={"a": torch.tensor([1 + 2 * rank])})  # the seed's op: mean
    check(d["a"].dtype == torch.int64 and d["a"].item() == n, f"data= with the mean: {d}")
    expect_error("both dicts", lambda: dist.all_reduce_dict(py_dict={}, data={}), TypeError,
                 "all_reduce_dict")


def transposed(rank):
    return (torch.arange(6.0).reshape(2, 3) * (rank + 1)).t()


def total(n):
    return torch.arange(6.0).reshape(2, 3).t() * (n * (n + 1) // 2)


def non_contiguous(rank, n):
    """Item 3: any layout, results written into the caller's tensor."""
    t = transposed(rank)
    dist.all_reduce(t)
    check(torch.equal(t, total(n)), f"all_reduce of a transposed tensor: {t.tolist()}")
    t = transposed(rank)
    dist.all_reduce(t, async_op=True).wait()
    check(torch.equal(t, total(n)), "async all_reduce of a transposed tensor")
    # Without wait(): the result is in the tensor once is_completed() says
    # so, and after the Work is dropped, as torch's in-place results are.
    t = transposed(rank)
    work = dist.all_reduce(t, async_op=True)
    while not work.is_completed():
        time.sleep(0.001)
    check(torch.equal(t, total(n)), "async all_reduce, transposed, after is_completed()")
    t = transposed(rank)
    work = dist.all_reduce(t, async_op=True)
    del work
    gc.collect()
    check(torch.equal(t, total(n)), "async all_reduce, transposed, its Work dropped")
    t = torch.arange(8.0)[::2] * (rank + 1)
    dist.all_reduce(t, "mean")
    check(torch.equal(t, torch.arange(8.0)[::2] * (n + 1) / 2), f"mean of a strided view: {t}")
    t = transposed(rank)
    dist.reduce(t, dst=n - 1)
    check(torch.equal(t, total(n) if rank == n - 1 else transposed(rank)), "reduce, transposed")
    got = dist.all_gather(transposed(rank))
    check(len(got) == n and all(torch.equal(g, transposed(r)) for r, g in enumerate(got)),
          "all_gather(data) of a transposed tensor")
    got = dist.gather(transposed(rank), dst=n - 1)
    want = [transposed(r) for r in range(n)] if rank == n - 1 else []
    check(len(got) == len(want) and all(torch.equal(a, b) for a, b in zip(got, want)),
          "gather(data) of a transposed tensor")


def complex_tensors(rank, n):
    """Item 4: complex tensors as their real and imaginary parts."""
    z = torch.tensor([1 + 2j * rank, -1j], dtype=torch.complex64)
    dist.all_reduce(z)
    check(torch.equal(z, torch.tensor([n + 1j * n * (n - 1), -1j * n], dtype=torch.complex64)),
          f"complex all_reduce sum: {z}")
    z = torch.tensor([2.0 * rank + 2j], dtype=torch.complex128)
    dist.all_reduce(z, "mean")
    check(torch.equal(z, torch.tensor([(n - 1) + 2j], dtype=torch.complex128)), f"mean {z}")
    z = torch.tensor([[1 + 1j, 2j], [3, 4 - 1j]]).t() * (rank + 1)  # complex and transposed
    dist.all_reduce(z)
    check(torch.equal(z, torch.tensor([[1 + 1j, 2j], [3, 4 - 1j]]).t() * (n * (n + 1) // 2)),
          f"transposed complex all_reduce: {z}")
    mine = torch.tensor([rank + 1j * rank], dtype=torch.complex64)
    got = dist.all_gather(mine)
    want = [torch.tensor([r + 1j * r], dtype=torch.complex64) for r in range(n)]
    check(len(got) == n and all(torch.equal(a, b) for a, b in zip(got, want)),
          f"complex all_gather(data): {got}")
    slots = [torch.zeros(1, dtype=torch.complex64) for _ in range(n)]
    dist.all_gather(slots, mine)
    check(all(torch.equal(a, b) for a, b in zip(slots, want)), "complex all_gather(list, tensor)")
    got = dist.gather(mine, dst=0)
    check(all(torch.equal(a, b) for a, b in zip(got, want)) and len(got) == (n if rank == 0 else 0),
          f"complex gather(data): {got}")
    slots = [torch.zeros(1, dtype=torch.complex64) for _ in range(n)] if rank == 0 else None
    dist.gather(mine, slots, dst=0)
    check(rank != 0 or all(torch.equal(a, b) for a, b in zip(slots, want)),
          "complex gather(tensor, gather_list)")
    z = torch.tensor([5 - 3j]) if rank == n - 1 else torch.zeros(1, dtype=torch.complex64)
    dist.broadcast(z, src=n - 1)
    check(torch.equal(z, torch.tensor([5 - 3j])), f"complex broadcast: {z}")
    if n > 1:
        for op in ("max", "min", "product"):
            expect_error(f"complex {op}", lambda: dist.all_reduce(torch.ones(1, dtype=torch.cfloat),
                                                                  op), RuntimeError,
                         f"does not support {op} on complex tensors")
        in_step("complex max", n)


def numpy_gather(rank, n):
    """Item 5: mmengine's gather takes numpy arrays, as all_gather does."""
    got = dist.gather(np.full((2, 3), rank, dtype=np.float32)[:, ::2], dst=n - 1)
    if rank == n - 1:
        check(len(got) == n and all(isinstance(g, np.ndarray) and np.array_equal(g, np.full((2, 2), r))
                                    for r, g in enumerate(got)), f"gather of numpy arrays: {got}")
    else:
        check(got == [], "gather of numpy arrays elsewhere: []")


def collect(rank, n):
    """Items 6 and 7: a path as the third argument, and the seed's names."""
    size = 2 * n - 1
    part = [f"r{i}" for i in range(rank, size, n)]
    want = [f"r{i}" for i in range(size)]
    where = pathlib.Path(os.environ["TEST_TMPDIR"]) / "collect_path"
    got = dist.collect_results(part, size, where)
    check(got == want if rank == 0 else got is None, f"collect_results(part, size, Path): {got}")
    dist.barrier()  # rank 0 removes the directory after the others returned
    check(not where.exists(), "the path's directory is removed")
    got = dist.collect_results(part, size, tmpdir=where.with_name("collect_keyword"))
    check(got == want if rank == 0 else got is None, f"collect_results(tmpdir=Path): {got}")
    got = dist.collect_results(result_part=part, size=size)
    check(got == want if rank == 0 else got is None, f"collect_results(result_part=): {got}")
    got = dist.collect_results(results=part, size=size, device="gpu")
    check(got == want if rank == 0 else got is None, f"collect_results(results=, device=): {got}")
    expect_error("a device in the seed's form", lambda: dist.collect_results(
        result_part=part, size=size, device="cpu"), TypeError, "collect_results")


def master_only_wraps():
    """Item 11: modelopt's master_only keeps the function's name and doc."""
    def named():
        """The doc."""
        return 7
    wrapped = distributed.master_only(named)
    check((wrapped.__name__, wrapped.__doc__, wrapped.__wrapped__) == ("named", "The doc.", named),
          f"master_only keeps the name: {wrapped.__name__}")
    check(wrapped() == 7, "master_only's value on every rank")


def main():
    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    modelopt_groups_before_joining(rank, n)
    dist.init_dist("pytorch", backend="gloo", timeout=60)
    # dist.new_group's group outside it: made and asked locally too.
    first = dist.new_group([0])
    made = distributed.DistributedProcessGroup(first)
    check((made.rank(), made.world_size()) == ((0, 1) if rank == 0 else (-1, -1)),
          f"DistributedProcessGroup(dist.new_group([0])): {made.rank()} / {made.world_size()}")
    for part in (seeds, reduce_dicts, non_contiguous, complex_tensors, numpy_gather, collect):
        try:
            part(rank, n)
        except Exception as e:
            check(False, f"{part.__name__}: {type(e).__name__}: {e}")
            traceback.print_exc()
            dist.barrier()  # the next part starts together
    master_only_wraps()
    dist.barrier()
    tdist.destroy_process_group()
    dist.destroy()
    return finish("review checks")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(1)
