"""Groups torch.distributed knows: once torch.distributed is initialized,
every group distkit.dist hands out (the default group, get_local_group(),
new_group(), modelopt's get_group) is torch's own, so torch.distributed's
calls (get_rank(group), broadcast(..., group=...), all_reduce) accept it,
and distkit's calls accept it too. Checked twice in one job:

  1. through modelopt's ``setup()`` (distkit's init_dist: torch.distributed
     on the "distkit" backend), with modelopt's current module beside it:
     broadcast_state_dict, FileLock across processes, _serialize's
     ByteTensor, is_dtensor_sharded, abort and cleanup;
  2. torch.distributed initialized by the program itself (Gloo), as
     mmengine's own tests of mmengine.dist do, also with a group torch
     made directly.

Each group is checked against torch's own answers and against values
computed here."""
import os
import sys
import time
from unittest import mock

import torch
import torch.distributed as tdist

from distkit import dist, distributed
from testing.python.rank_check import check, finish


def check_group(group, members, what: str) -> None:
    """``group`` (from distkit) over global ``members``, checked through
    torch.distributed and distkit.dist on every rank of the world."""
    rank, n = tdist.get_rank(), tdist.get_world_size()
    members = sorted(members)
    if rank not in members:
        check(group is tdist.GroupMember.NON_GROUP_MEMBER and dist.get_rank(group) == -1,
              f"{what}: NON_GROUP_MEMBER outside, as torch's new_group gives")
        return
    mine = members.index(rank)
    check(tdist.get_rank(group) == mine and tdist.get_world_size(group) == len(members),
          f"{what}: torch.distributed.get_rank/get_world_size accept it "
          f"({tdist.get_rank(group)}, {tdist.get_world_size(group)})")
    check(dist.get_rank(group) == mine and dist.get_world_size(group) == len(members),
          f"{what}: distkit's rank and size")
    last = members[-1]
    t = torch.full((3,), float(rank))
    tdist.broadcast(t, src=last, group=group)  # torch's src: a global rank
    check(torch.equal(t, torch.full((3,), float(last))), f"{what}: torch.distributed.broadcast {t}")
    t = torch.tensor([float(rank + 1)])
    tdist.all_reduce(t, group=group)
    check(t.item() == sum(m + 1 for m in members), f"{what}: torch.distributed.all_reduce")
    t = torch.tensor([float(rank + 1), 1.0])
    dist.all_reduce(t, group=group)
    check(t.tolist() == [sum(m + 1 for m in members), len(members)],
          f"{what}: distkit's all_reduce on it {t}")
    t = torch.full((2,), float(rank))
    dist.broadcast(t, src=last, group=group)
    check(torch.equal(t, torch.full((2,), float(last))), f"{what}: distkit's broadcast")
    check(dist.all_gather_object(rank, group) == members,  # a torch group is a group argument
          f"{what}: all_gather_object(data, group)")
    check(dist.get_group_rank(group, last) == len(members) - 1 and
          dist.get_global_rank(group, 0) == members[0], f"{what}: global and group ranks")
    seeds = dist.all_gather_object(dist.sync_random_seed(group), group)
    check(len(set(seeds)) == 1, f"{what}: sync_random_seed(group) agrees: {seeds}")
    # mmengine's get_backend is torch's answer ("distkit" on distkit's
    # backend); the transport stays distkit's (Gloo on both paths here).
    check(dist.get_backend(group) == str(tdist.get_backend(group)) and
          dist.get_backend() == str(tdist.get_backend()) and dist.transport(group) == "gloo" and
          dist.get_comm_device(group) == torch.device("cpu"),
          f"{what}: backend {dist.get_backend(group)} (torch: {tdist.get_backend(group)}), "
          f"transport {dist.transport(group)}, device {dist.get_comm_device(group)}")


def check_groups(backend: str) -> None:
    """The default group, the local group, new groups and modelopt's."""
    rank, n = tdist.get_rank(), tdist.get_world_size()
    default = dist.get_default_group()
    check(default is tdist.distributed_c10d._get_default_group(),
          f"{backend}: get_default_group() is torch's default group")
    check_group(default, range(n), f"{backend}: default group")
    local = dist.get_local_group()
    check(tdist.get_rank(local) == dist.get_local_rank() and
          tdist.get_world_size(local) == dist.get_local_size(),
          f"{backend}: torch's get_rank(get_local_group()) is get_local_rank()")
    start = rank - dist.get_local_rank()
    check_group(local, range(start, start + dist.get_local_size()), f"{backend}: local group")
    pair = dist.new_group([n - 1, 0])  # torch numbers members in ascending order
    check_group(pair, [0, n - 1], f"{backend}: new_group")
    odd = dist.new_group([r for r in range(n) if r % 2 == 1])
    check_group(odd, [r for r in range(n) if r % 2 == 1], f"{backend}: new_group of odd ranks")
    group = distributed.get_group(list(range(n)))
    check_group(group, range(n), f"{backend}: modelopt's get_group")
    check(distributed.rank(group) == rank and distributed.size(group) == n,
          f"{backend}: modelopt rank/size of its group")
    state = distributed.ParallelState(pair if rank in (0, n - 1) else None, -1, group)
    want = (0 if rank == 0 else 1, 2) if rank in (0, n - 1) else (rank, n)
    check((state.data_parallel_group.rank(), state.data_parallel_group.world_size()) == want and
          state.expert_model_parallel_group.world_size() == n,
          f"{backend}: ParallelState over torch's groups")
    check(distributed.allgather(rank, group) == list(range(n)), f"{backend}: modelopt allgather")


def modelopt_module(path: str) -> None:
    """modelopt's current module, multi-rank parts (under setup())."""
    rank, n = tdist.get_rank(), tdist.get_world_size()
    source = {"w": torch.arange(6.0).reshape(2, 3), "step": torch.tensor(7)}
    got = distributed.broadcast_state_dict(source if rank == n - 1 else None, n - 1,
                                           torch.device("cpu"))
    check(sorted(got) == ["step", "w"] and torch.equal(got["w"], source["w"]) and
          got["step"].dtype == torch.int64 and got["step"].item() == 7,
          f"broadcast_state_dict from rank {n - 1}: {got}")
    try:
        distributed.broadcast_state_dict(None, 0, torch.device("cpu"))
        check(False, "broadcast_state_dict with None on src raises")
    except AssertionError as e:
        check(str(e) == "src rank 0 passed no state dict to broadcast", f"its message: {e}")
    # FileLock across the ranks: a read-modify-write of a counter, each
    # rank three times; with the lock no increment is lost.
    counter, lock = os.path.join(path, "counter"), os.path.join(path, "counter.lock")
    if rank == 0:
        with open(counter, "w") as f:
            f.write("0")
    dist.barrier()
    for _ in range(3):
        with distributed.FileLock(lock, all_acquire=True, poll_time=0.005):
            with open(counter) as f:
                value = int(f.read())
            time.sleep(0.01)
            with open(counter, "w") as f:
                f.write(str(value + 1))
    dist.barrier()
    with open(counter) as f:
        check(int(f.read()) == 3 * n, "FileLock(all_acquire=True): no increment lost")
    check(not os.path.exists(lock), "FileLock removes its file")
    dist.barrier()


def modelopt_local() -> None:
    """modelopt's current module, one process's parts (before joining)."""
    payload = distributed._serialize({"a": torch.arange(3), "b": "text"})
    check(isinstance(payload, torch.ByteTensor) and payload.dim() == 1, "_serialize: a ByteTensor")
    check(torch.equal(payload, distributed._serialize({"a": torch.arange(3), "b": "text"})),
          "_serialize is deterministic (modelopt's tests compare with torch.equal)")
    padded = torch.cat([payload, torch.zeros(5, dtype=torch.uint8)])
    back = distributed._deserialize(padded, size=payload.numel())
    check(torch.equal(back["a"], torch.arange(3)) and back["b"] == "text", "_deserialize(size=)")
    check(distributed.is_dtensor_sharded(torch.nn.Linear(2, 2)) is False,
          "is_dtensor_sharded: False (no DTensor in this torch)")
    lock = os.path.join(os.environ["TEST_TMPDIR"], f"mine{os.environ['RANK']}.lock")
    with distributed.FileLock(lock) as held:
        check(os.path.exists(lock) and held.handle is not None, "FileLock holds its file")
        with distributed.FileLock(lock) as second:  # all_acquire=False: goes on without it
            check(second.handle is None, "a second FileLock without all_acquire goes on")
        check(not os.path.exists(lock), "its exit removes the file all the same, as modelopt's")
        open(lock, "a").close()  # for the first one's exit
    check(not os.path.exists(lock), "FileLock's exit removes the file")
    for raised, want in ((ValueError("boom"), 3), (SystemExit(5), 45)):
        pid = os.fork()
        if pid == 0:  # the child: abort() from an except block (its traceback hidden)
            os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
            try:
                try:
                    raise raised
                except BaseException:
                    distributed.abort(3)
            except SystemExit as e:  # raised again, not swallowed
                os._exit(40 + e.code)
            os._exit(99)
        status = os.waitpid(pid, 0)[1]
        check(os.WIFEXITED(status) and os.WEXITSTATUS(status) == want,
              f"abort with {raised!r} in flight: exit {os.WEXITSTATUS(status)}, want {want}")
    check(all(hasattr(distributed, name) for name in (
        "broadcast_state_dict", "setup", "cleanup", "abort", "FileLock", "is_dtensor_sharded",
        "local_rank", "is_last_process", "get_group", "fsdp2_wrap", "is_fsdp2_model")),
        "modelopt's names")


def through_setup() -> None:
    rank = int(os.environ["RANK"])
    distributed.setup(timeout=__import__("datetime").timedelta(seconds=60))
    check(distributed.is_initialized() and tdist.get_backend() == "distkit",
          f"setup(): torch.distributed on distkit ({tdist.get_backend()})")
    check_groups("distkit backend")
    path = os.path.join(os.environ["TEST_TMPDIR"], "shared")
    os.makedirs(path, exist_ok=True)
    modelopt_module(path)
    with mock.patch.object(distributed, "barrier") as barrier:
        if rank % 2 == 0:
            distributed.cleanup()
            check(barrier.call_count == 1, "cleanup() without an exception: one barrier")
        else:
            try:
                raise RuntimeError("unwinding")
            except RuntimeError:
                distributed.cleanup()
            check(barrier.call_count == 0, "cleanup() while an exception unwinds: no barrier")
    check(not distributed.is_initialized() and not tdist.is_initialized(), "cleanup() left the job")


def torch_initialized() -> None:
    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    init_file = os.path.join(os.environ["TEST_TMPDIR"], "torch_init")
    tdist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=n)
    dist.init_local_group(1)  # a "node" per rank: every rank makes every node's torch group
    check((dist.get_local_rank(), dist.get_local_size()) == (0, 1), "local group of one")
    check_groups("gloo")
    with mock.patch.object(torch, "tensor", return_value=torch.tensor(1024)) as made:
        seed = dist.sync_random_seed()  # mmengine's test: rank 0's torch.tensor is broadcast
    check(seed == 1024 and made.called, f"sync_random_seed through torch.tensor: {seed}")
    direct = tdist.new_group([0, n - 1])  # torch's, made without distkit
    if rank in (0, n - 1):
        t = torch.tensor([1.0])
        dist.all_reduce(t, group=direct)
        check(t.item() == 2.0, "distkit's all_reduce on a group torch made directly")
    dist.barrier()
    dist.destroy()
    tdist.destroy_process_group()


def main():
    modelopt_local()
    through_setup()
    torch_initialized()
    return finish("torch-known groups and modelopt's module")


if __name__ == "__main__":
    sys.exit(main())
