"""torch.distributed's own new_group on a job whose distkit world is MPI
(mpirun, init_dist('mpi', backend='mpi'), torch's default group on the
"distkit" backend): torch calls the backend's creator on a group's members
alone, so the subgroup is made among them (MPI_Comm_create_group), while the
other ranks go on. Every value is computed here from the ranks."""
import sys

import torch
import torch.distributed as tdist

from distkit import dist


def check(cond, what):
    if not cond:
        raise AssertionError(f"rank {tdist.get_rank()}: {what}")


def exercise(group, members, rank):
    """Collectives on `group` (members: its global ranks, ascending as torch
    orders them), checked against values computed from the ranks."""
    if rank not in members:
        check(group == tdist.GroupMember.NON_GROUP_MEMBER, "a non-member gets NON_GROUP_MEMBER")
        return
    me = members.index(rank)
    check(tdist.get_rank(group) == me and tdist.get_world_size(group) == len(members),
          "rank and size in the subgroup")
    t = torch.tensor([rank + 1.0, 2.0 * rank], dtype=torch.float64)
    tdist.all_reduce(t, group=group)
    check(t.tolist() == [sum(r + 1.0 for r in members), sum(2.0 * r for r in members)],
          f"all_reduce over {members}: {t.tolist()}")
    out = [torch.zeros(3, dtype=torch.int32) for _ in members]
    tdist.all_gather(out, torch.tensor([rank, rank * 7, -rank], dtype=torch.int32), group=group)
    check([o.tolist() for o in out] == [[r, r * 7, -r] for r in members],
          f"all_gather over {members}")
    b = torch.tensor([float(rank)] * 4)
    tdist.broadcast(b, src=members[-1], group=group)  # src is a global rank
    check(b.tolist() == [float(members[-1])] * 4, f"broadcast from {members[-1]}")
    work = tdist.all_reduce(torch.ones(1 << 20), group=group, async_op=True)
    work.wait()


def main():
    dist.init_dist("mpi", backend="mpi")
    rank, size = tdist.get_rank(), tdist.get_world_size()
    check(tdist.get_backend() == "distkit", f"torch's default group is on distkit, "
          f"not {tdist.get_backend()}")
    check(dist.get_rank() == rank and dist.get_world_size() == size, "one numbering")
    ends = sorted({0, size - 1})
    odds = [r for r in range(size) if r % 2 == 1] or [0]
    first = tdist.new_group(ends)  # every rank calls new_group, as torch requires
    second = tdist.new_group(odds)
    exercise(first, ends, rank)
    exercise(second, odds, rank)
    t = torch.tensor([1.0])
    tdist.all_reduce(t)  # the world still works beside its subgroups
    check(t.item() == size, "world all_reduce")
    tdist.barrier()
    print(f"rank {rank}/{size}: torch new_group on distkit over mpi: groups {ends} and {odds} "
          f"checked", flush=True)


if __name__ == "__main__":
    sys.exit(main())
