"""distkit.dist where user code initialized torch.distributed itself (gloo,
no distkit init), as training scripts and mmengine's own tests of
mmengine.dist do: every mmengine-style call answers for torch's job, with
values checked on every rank (topology, collectives, object collectives,
results, the local group, device helpers, master_only, modelopt's surface),
and torch's own collectives keep working beside it."""
import os
import sys

import numpy as np
import torch
import torch.distributed as tdist

from distkit import dist, distributed
from testing.python.rank_check import check, finish


def main():
    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if "--no-master-addr" in sys.argv[1:]:
        # torch's file:// rendezvous needs no address, so distkit's join
        # finds rank 0 by its interfaces' addresses (across namespace-hosts,
        # whose hostnames resolve nowhere).
        os.environ.pop("MASTER_ADDR", None)
    init_file = os.path.join(os.environ["TEST_TMPDIR"], "torch_init")
    tdist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=n)
    # Topology: torch's answers, without joining (these are local calls).
    check(dist.is_distributed(), "is_distributed")
    check(dist.get_dist_info() == (rank, n), f"get_dist_info {dist.get_dist_info()}")
    check(dist.get_backend() == "gloo", f"get_backend {dist.get_backend()}")
    check(dist.is_main_process() == (rank == 0), "is_main_process")
    check(dist.get_comm_device() == torch.device("cpu"), "get_comm_device")
    try:
        dist.get_local_rank()
        check(False, "get_local_rank before init_local_group")
    except RuntimeError as e:
        check("Local process group is not created" in str(e), f"local group error: {e}")
    # Collectives: the first one joins the job through torch's store.
    t = torch.full((3,), float(rank))
    dist.all_reduce(t)
    check(torch.equal(t, torch.full((3,), float(n * (n - 1) / 2))), f"all_reduce {t}")
    m = torch.tensor([float(rank)])
    dist.all_reduce(m, op="mean")
    check(abs(m.item() - (n - 1) / 2) < 1e-6, "all_reduce mean")
    got = dist.all_gather(torch.tensor([rank, 10 * rank]))
    check([g.tolist() for g in got] == [[r, 10 * r] for r in range(n)], "all_gather")
    b = torch.arange(4.0) if rank == 0 else torch.zeros(4)
    dist.broadcast(b, 0)
    check(torch.equal(b, torch.arange(4.0)), "broadcast")
    arr = np.full(2, rank, dtype=np.int64)
    dist.all_reduce(arr, op="max")
    check(arr.tolist() == [n - 1, n - 1], "numpy all_reduce")
    d = {"a": torch.tensor(float(rank)), "b": torch.tensor([1.0, float(rank)])}
    dist.all_reduce_dict(d, op="sum")
    check(d["a"].item() == n * (n - 1) / 2 and d["b"].tolist() == [n, n * (n - 1) / 2],
          "all_reduce_dict")
    # Object collectives.
    check(dist.all_gather_object({"r": rank}) == [{"r": r} for r in range(n)], "all_gather_object")
    got = dist.gather_object(rank * 3, dst=0)
    check(got == [3 * r for r in range(n)] if rank == 0 else got is None, "gather_object")
    objs = ["x", rank] if rank == 0 else [None, None]
    dist.broadcast_object_list(objs, 0)
    check(objs == ["x", 0], "broadcast_object_list")
    seeds = dist.all_gather_object(dist.sync_random_seed())
    check(len(set(seeds)) == 1, "sync_random_seed")
    part = [f"r{i}" for i in range(rank, 7, n)]
    res = dist.collect_results(part, 7)
    check(res == [f"r{i}" for i in range(7)] if rank == 0 else res is None, "collect_results")
    # The local group, once created.
    dist.init_local_group(0, n)
    check((dist.get_local_rank(), dist.get_local_size()) == (rank, n), "local group")
    check(tdist.get_rank(dist.get_local_group()) == dist.get_local_rank(),  # mmengine's test
          "torch.distributed.get_rank(get_local_group()): a group torch knows")
    # master_only and modelopt's surface.
    check(dist.master_only(lambda: "m")() == ("m" if rank == 0 else None), "master_only")
    check(distributed.is_initialized() and distributed.size() == n and distributed.rank() == rank,
          "modelopt topology")
    check(distributed.broadcast({"k": rank}, src=0) == {"k": 0}, "modelopt broadcast")
    check(distributed.ParallelState().data_parallel_group.world_size() == n, "ParallelState")
    # torch's own collectives still work beside distkit's.
    t = torch.ones(2)
    tdist.all_reduce(t)
    check(torch.equal(t, torch.full((2,), float(n))), "torch.distributed.all_reduce")
    dist.barrier()
    status = finish("torch-joined checks")
    dist.destroy()
    tdist.destroy_process_group()
    return status


if __name__ == "__main__":
    sys.exit(main())
