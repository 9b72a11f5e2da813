"""Leaving the job and joining it again in one process (init_dist,
destroy, init_dist) under distrun, whose store outlives every world:
torch.distributed's new_group on the "distkit" backend works in every
round, within its own timeout, and the members of a subgroup agree on the
distkit group under it. Before, the second round's new_group read the first
round's keys (torch's store_based_barrier_key counts, under the same
"torch/" prefix) and timed out; a member could read the name an earlier
making of the group left (distkit/name) before rank 0 wrote the new one.

Also the subgroup keys alone: the creator of the "distkit" backend run twice
on one store under one torch name (what a store that outlives
destroy_process_group gives torch.distributed.init_process_group's
subgroups), rank 0 late the second time: every member takes the second
making's name, not the first's."""
import datetime
import sys
import time
import weakref

import torch
import torch.distributed as tdist

from distkit import dist, torch_backend
from distkit.dist import groups
from testing.python.rank_check import check, finish

ROUNDS = 2
TIMEOUT = datetime.timedelta(seconds=15)


def names_agree(group, members, what: str) -> None:
    """The distkit group under torch's ``group`` has one name on every
    member (an all_gather over the default group)."""
    mine = group._dk_group.name() if group is not tdist.GroupMember.NON_GROUP_MEMBER else None
    names = [None] * tdist.get_world_size()
    tdist.all_gather_object(names, mine)
    got = {names[r] for r in members}
    check(len(got) == 1 and None not in got, f"{what}: the members' distkit groups: {names}")


def subgroups(it: int) -> None:
    rank, n = tdist.get_rank(), tdist.get_world_size()
    for members in ([0, 1], list(range(n))):
        what = f"round {it}: new_group({members})"
        started = time.monotonic()
        try:
            g = tdist.new_group(members, timeout=TIMEOUT)
        except RuntimeError as e:
            check(False, f"{what}: {str(e)[:300]}")
            continue
        check(time.monotonic() - started < 10, f"{what} took {time.monotonic() - started:.1f} s")
        if rank in members:
            t = torch.full((3,), float(rank + 1))
            tdist.all_reduce(t, group=g)
            want = float(sum(r + 1 for r in members))
            check(t.tolist() == [want] * 3, f"{what}: all_reduce gave {t.tolist()}, want {want}")
        names_agree(g, members, what)


def same_torch_name_twice(it: int) -> None:
    """_create twice on one store prefix (a torch group name met again)."""
    rank, n = tdist.get_rank(), tdist.get_world_size()
    store = torch_backend.job_store(prefix=f"rejoin_test/{it}/")
    made = []
    for making in range(2):
        if making == 1 and rank == 0:
            time.sleep(1.0)  # the others read the name first
        try:
            pg = torch_backend._create(store, rank, n, datetime.timedelta(seconds=10))
        except Exception as e:  # noqa: BLE001 - reported, the others fail alike
            check(False, f"round {it}, making {making}: {str(e)[:300]}")
            return
        t = torch.ones(2)
        pg.allreduce([t]).wait()
        check(t.tolist() == [float(n)] * 2, f"round {it}, making {making}: {t.tolist()}")
        made.append(pg._dk_group.name())
    names = [None] * n
    tdist.all_gather_object(names, made)
    check(all(x == names[0] for x in names) and names[0][0] != names[0][1],
          f"round {it}: the twice-made group's names on every rank: {names}")


def main() -> int:
    for it in range(ROUNDS):
        dist.init_dist("pytorch", backend="gloo", timeout=20)
        check(torch_backend.implementation()[0] == "c++", f"{torch_backend.implementation()}")
        subgroups(it)
        if it == ROUNDS - 1:
            same_torch_name_twice(it)
        tdist.barrier()
        world = weakref.ref(groups.library_default_group())
        dist.destroy()
        # torch's default group held distkit's world: destroy releases it
        # (its connections and threads) before the library shuts down, not
        # at the next group's making or at exit.
        check(world() is None, f"round {it}: the world's group outlived destroy()")
    return finish("rejoin checks")


if __name__ == "__main__":
    sys.exit(main())
