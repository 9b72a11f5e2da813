"""The seed document's "Usage Examples" (seeds/000_cc5924fa2bafbde9.txt) run
as written, CPU variants (``.cuda()`` dropped, backend gloo, no
device_ids), on every rank of a real job; each result is checked against
values every rank computes itself. Then every row of the README's
compatibility table: the seed's call forms beside mmengine's, the defaults
where they differ, async_op, global ranks for src / dst, and ambiguous calls
refused."""
import os
import shutil
import sys

import numpy as np
import torch
from torch import nn

from distkit.dist import (Work, all_gather, all_gather_object, all_reduce, all_reduce_dict,
                          barrier, broadcast, broadcast_object_list, collect_results, gather,
                          gather_object, get_dist_info, get_local_rank, get_local_size, get_rank,
                          get_world_size, init_dist, init_local_group, is_main_process,
                          master_only, new_group, reduce, sync_random_seed)
from distkit import dist
from testing.python.rank_check import check, finish


def randn_of(rank, n, salt):
    """What rank `rank` draws for a snippet, computed by any rank."""
    return torch.randn(n, generator=torch.Generator().manual_seed(1000 * salt + rank))


def raises(exception, fn, *args, **kwargs) -> str:
    try:
        fn(*args, **kwargs)
    except exception as e:
        return str(e)
    return ""


# ---- the seed's Usage Examples ------------------------------------------------------


def basic_setup():
    # init_dist('pytorch', backend='nccl') on CPU: gloo.
    init_dist("pytorch", backend="gloo")
    rank, world_size = get_dist_info()
    local_rank = get_local_rank()  # right after init_dist, as the example does
    check((rank, world_size) == (int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])),
          "get_dist_info")
    check(local_rank == int(os.environ["LOCAL_RANK"]), f"get_local_rank {local_rank}")
    check(get_local_size() == int(os.environ["LOCAL_WORLD_SIZE"]), "get_local_size")


def communication():
    n, rank = get_world_size(), get_rank()
    # All-reduce operation
    loss = torch.tensor(0.5)
    all_reduce(loss, op="mean")  # Average loss across all processes
    check(abs(loss.item() - 0.5) < 1e-7, f"all_reduce mean of 0.5: {loss.item()}")
    mine = torch.tensor(float(rank))
    all_reduce(mine, op="mean")
    check(abs(mine.item() - (n - 1) / 2) < 1e-6, f"all_reduce mean of ranks: {mine.item()}")
    # All-gather operation
    torch.manual_seed(1000 + rank)
    local_tensor = torch.randn(4)
    gathered_tensors = [torch.zeros_like(local_tensor) for _ in range(get_world_size())]
    all_gather(gathered_tensors, local_tensor)
    check(all(torch.equal(gathered_tensors[r], randn_of(r, 4, 1)) for r in range(n)),
          "all_gather(tensor_list, tensor) fills the list in rank order")
    # Broadcast operation
    torch.manual_seed(2000 + rank)
    if get_rank() == 0:
        data = torch.randn(10)
    else:
        data = torch.zeros(10)
    broadcast(data, src=0)
    check(torch.equal(data, randn_of(0, 10, 2)), "broadcast from rank 0")
    # Dictionary all-reduce
    metrics = {"loss": torch.tensor(0.5), "acc": torch.tensor(0.9)}
    reduced_metrics = all_reduce_dict(metrics, op="mean")
    check(abs(reduced_metrics["loss"].item() - 0.5) < 1e-7
          and abs(reduced_metrics["acc"].item() - 0.9) < 1e-6, "all_reduce_dict of constants")
    varied = {"loss": torch.tensor(float(rank)), "count": torch.tensor([2 * rank + 1])}
    out = all_reduce_dict(varied)  # the seed's default op: mean
    check(abs(out["loss"].item() - (n - 1) / 2) < 1e-6, "all_reduce_dict default op is mean")
    # mmdet's: reduced float32 copies returned; alone, the dict as it was.
    want = torch.float32 if n > 1 else torch.int64
    check(out["count"].dtype == want and out["count"].item() == n,
          f"to_float: int64 values reduced and returned in float32, as mmdet's "
          f"({out['count']})")


def result_collection():
    n, rank = get_world_size(), get_rank()
    dataset = [f"sample{i}" for i in range(11)]

    def model(batch):
        return [s.upper() for s in batch]
    dataloader = [[dataset[i]] for i in range(rank, len(dataset), n)]  # DistributedSampler order
    results = []
    for batch in dataloader:
        outputs = model(batch)
        results.extend(outputs)
    all_results = collect_results(results, len(dataset))
    if is_main_process():
        check(all_results == [s.upper() for s in dataset], "collect_results in dataset order")
    else:
        check(all_results is None, "collect_results: None off rank 0")


def master_only_operations(tmp):
    @master_only
    def save_checkpoint(model, path):
        """Save checkpoint only on master process."""
        torch.save(model.state_dict(), path)
        return path

    path = os.path.join(tmp, "ckpt.pth")
    got = save_checkpoint(nn.Linear(2, 2), path)
    barrier()
    check(os.path.exists(path), "the master saved the checkpoint")
    check(got == (path if get_rank() == 0 else None), "master_only returns None elsewhere")


def advanced_ddp():
    from distkit.model import MMDistributedDataParallel, MMSeparateDistributedDataParallel
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2), nn.Linear(2, 2))
    model = MMDistributedDataParallel(
        model,
        output_device=None,
        broadcast_buffers=True,
        find_unused_parameters=True,
        bucket_cap_mb=25,
        gradient_as_bucket_view=True)
    x = torch.full((2, 3), float(get_rank() + 1))
    model(x).sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    everyone = all_gather_object(grads)
    check(all(torch.allclose(g, h) for other in everyone for g, h in zip(grads, other)),
          "MMDistributedDataParallel: gradients averaged")
    torch.manual_seed(0)
    separate = MMSeparateDistributedDataParallel(
        nn.ModuleDict({"gen": nn.Linear(3, 3), "disc": nn.Linear(3, 1)}),
        find_unused_parameters=True)
    check(all(sub.broadcast_buffers for sub in separate.module.children()),
          "MMSeparateDistributedDataParallel: the seed's default broadcast_buffers=True")


def fsdp_usage():
    from distkit.fsdp import CPUOffload, ShardingStrategy
    from distkit.model import MMFullyShardedDataParallel
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    model = MMFullyShardedDataParallel(
        model,
        sharding_strategy=ShardingStrategy.FULL_SHARD,
        cpu_offload=CPUOffload(offload_params=True),
        mixed_precision=None,
        backward_prefetch=None,
        forward_prefetch=False,
        limit_all_gathers=True)
    check(not model.use_orig_params, "MMFullyShardedDataParallel: the seed's use_orig_params=False")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.full((3, 4), float(get_rank()))).pow(2).mean().backward()
    opt.step()
    state = model.state_dict()
    everyone = all_gather_object({k: v.clone() for k, v in state.items()})
    check(all(torch.equal(state[k], other[k]) for other in everyone for k in state),
          "FSDP: the full state dict is the same on every rank after a step")


def random_seed():
    seed = sync_random_seed(42)
    check(seed == 42, f"sync_random_seed(42) -> {seed}")
    torch.manual_seed(seed)
    np.random.seed(seed)
    draws = all_gather_object((torch.rand(1).item(), float(np.random.rand())))
    check(len(set(draws)) == 1, "the same draws everywhere after seeding")
    offset = sync_random_seed(7 + get_rank())  # rank 0's value wins
    check(offset == 7, f"sync_random_seed: rank 0's seed on every rank ({offset})")
    drawn = all_gather_object(sync_random_seed())
    check(len(set(drawn)) == 1, "sync_random_seed(): one seed")


# ---- the compatibility table, row by row ---------------------------------------------


def call_forms(tmp):
    n, rank = get_world_size(), get_rank()
    # gather: the seed's form fills gather_list on dst; mmengine's returns it.
    dst = n - 1
    slots = [torch.zeros(2) for _ in range(n)] if rank == dst else None
    gather(torch.full((2,), float(rank)), slots, dst)
    if rank == dst:
        check(all(torch.equal(s, torch.full((2,), float(r))) for r, s in enumerate(slots)),
              "gather(tensor, gather_list, dst)")
    got = gather(torch.full((2,), float(rank)), dst=dst)
    check(len(got) == (n if rank == dst else 0), "gather(data, dst) returns the list on dst")
    # all_gather_object: object_list filled.
    objects = [None] * n
    all_gather_object(objects, {"rank": rank})
    check(objects == [{"rank": r} for r in range(n)], "all_gather_object(object_list, obj)")
    check(all_gather_object(rank) == list(range(n)), "all_gather_object(data)")
    check("ambiguous" in raises(TypeError, all_gather_object, objects, None),
          "all_gather_object(x, None) is ambiguous")
    # gather_object.
    into = [None] * n if rank == 0 else None
    gather_object(rank * 10, into, 0)
    check(rank != 0 or into == [10 * r for r in range(n)], "gather_object(obj, list, dst)")
    check(gather_object(rank * 10, 0) == ([10 * r for r in range(n)] if rank == 0 else None),
          "gather_object(data, dst)")
    # init_local_group(group_size): consecutive groups of that size.
    size = 2 if n % 2 == 0 else 1
    init_local_group(size)
    check((get_local_rank(), get_local_size()) == (rank % size, size),
          "init_local_group(group_size)")
    # collect_results(result_part, size, tmpdir): a path third is a tmpdir.
    where = os.path.join(tmp, "collect_positional")
    part = [f"r{i}" for i in range(rank, 5, n)]
    res = collect_results(part, 5, where)
    check(res == [f"r{i}" for i in range(5)] if rank == 0 else res is None,
          "collect_results(result_part, size, tmpdir)")
    barrier()
    check(not os.path.exists(where), "the tmpdir is removed")
    check("device must be" in raises(NotImplementedError, collect_results, part, 5, device="tpu"),
          "device='tpu' is still refused")


def async_ops():
    n, rank = get_world_size(), get_rank()
    t = torch.full((3,), float(rank))
    work = all_reduce(t, async_op=True)
    check(isinstance(work, Work), "all_reduce(async_op=True) returns a Work")
    work.wait()
    check(work.is_completed() and work.is_success(), "Work completed")
    check(torch.equal(t, torch.full((3,), float(n * (n - 1) / 2))), "async all_reduce result")
    slots = [torch.zeros(3) for _ in range(n)]
    all_gather(slots, torch.full((3,), rank + 0.5), async_op=True).wait()
    check(all(torch.equal(s, torch.full((3,), r + 0.5)) for r, s in enumerate(slots)),
          "async all_gather")
    b = torch.full((2,), 9.0) if rank == 0 else torch.zeros(2)
    broadcast(b, 0, async_op=True).wait()
    check(torch.equal(b, torch.full((2,), 9.0)), "async broadcast")
    r = torch.full((2,), 1.0)
    reduce(r, 0, async_op=True).wait()
    check(rank != 0 or torch.equal(r, torch.full((2,), float(n))), "async reduce")
    slots = [torch.zeros(1) for _ in range(n)] if rank == 0 else None
    gather(torch.tensor([float(rank)]), gather_list=slots, dst=0, async_op=True).wait()
    check(rank != 0 or [s.item() for s in slots] == list(range(n)), "async gather")
    barrier(async_op=True).wait()
    # Dropping a Work without waiting waits (the tensor is lent until then).
    t = torch.ones(1)
    all_reduce(t, async_op=True)
    check(t.item() == n, "a dropped Work finished its all_reduce")


def global_ranks():
    n, rank = get_world_size(), get_rank()
    odd = list(range(1, n, 2))
    group = new_group(odd) if odd else None
    if rank not in odd or not odd:
        return
    last = odd[-1]
    t = torch.full((2,), float(rank))
    broadcast(t, src=last, group=group)  # a global rank, as in torch
    check(torch.equal(t, torch.full((2,), float(last))), "broadcast src is a global rank")
    s = torch.ones(1)
    reduce(s, dst=last, group=group)
    check(rank != last or s.item() == len(odd), "reduce dst is a global rank")
    got = gather(torch.tensor([float(rank)]), dst=last, group=group)
    check(rank != last or [x.item() for x in got] == [float(r) for r in odd],
          "gather dst is a global rank")
    objs = ["from last"] if rank == last else [None]
    broadcast_object_list(objs, src=last, group=group)
    check(objs == ["from last"], "broadcast_object_list src is a global rank")
    check(dist.get_group_rank(group, last) == len(odd) - 1
          and dist.get_global_rank(group, 0) == 1, "get_group_rank / get_global_rank")
    if len(odd) > 1:  # a group of one returns at once, as mmengine does
        message = raises(ValueError, broadcast, t, src=0, group=group)
        check("Global rank 0 is not part of group" in message, f"src outside the group: {message}")


def init_backends():
    import distkit.dist.launch as launch
    for package in ("deepspeed", "colossalai"):
        try:
            __import__(package)
            continue  # installed: mmengine's path runs; nothing to refuse
        except ImportError:
            pass
        message = raises(ImportError, launch._init_with_package, package, "pytorch", "gloo", {})
        check(f"needs the {package!r} package" in message, f"init_backend={package}: {message}")


def main():
    tmp = os.environ.get("TEST_TMPDIR", "/tmp")
    basic_setup()
    shared = os.path.join(tmp, "seed_examples")
    if get_rank() == 0:
        os.makedirs(shared, exist_ok=True)
    barrier()
    communication()
    result_collection()
    master_only_operations(shared)
    advanced_ddp()
    fsdp_usage()
    random_seed()
    call_forms(shared)
    async_ops()
    global_ranks()
    init_backends()
    barrier()
    if get_rank() == 0:
        shutil.rmtree(shared, ignore_errors=True)
    status = finish("seed examples")
    dist.destroy()
    return status


if __name__ == "__main__":
    sys.exit(main())
