"""torch.distributed.new_group on the "distkit" backend, where its making
cannot complete: it fails, on the members, within bounds, saying why.

--before-join (3 ranks): torch.distributed initialized with Gloo by user
code and distkit not joined yet; new_group([0, 1], backend="distkit") on
every rank. torch makes the group's backend on its members only, and
joining torch's job needs every rank: the members used to wait for rank 2's
join, and rank 2 in torch's barrier after new_group, until the store's
timeout (30 min). Now the members raise at once, naming the cause; rank 2's
barrier ends with new_group's own timeout.

--late-member (2 ranks): init_process_group("distkit"); rank 1 never calls
new_group, rank 0 calls new_group([0, 1], timeout=3 s). Its making waited
for rank 1's key for the store's timeout (30 min); new_group's timeout now
bounds it."""
import datetime
import os
import sys
import time

import torch.distributed as tdist

from distkit import dist
from distkit.dist import groups
from testing.python.rank_check import check, finish

TIMEOUT = datetime.timedelta(seconds=3)


def init_torch(backend: str, rank: int, n: int) -> None:
    init = os.path.join(os.environ["TEST_TMPDIR"], "torch_init")
    tdist.init_process_group(backend, init_method=f"file://{init}", rank=rank, world_size=n)


def before_join(rank: int, n: int) -> None:
    init_torch("gloo", rank, n)
    check(not groups.joined(), "distkit has not joined torch's job yet")
    started = time.monotonic()
    try:
        tdist.new_group([0, 1], backend="distkit", timeout=TIMEOUT)
        error = None
    except RuntimeError as e:
        error = str(e)
    took = time.monotonic() - started
    if rank in (0, 1):
        check(error is not None and "before distkit joined" in error
              and "joining needs every rank" in error,
              f"member {rank}: new_group before the join: {error!r}")
        check(took < 2, f"member {rank}: the refusal took {took:.1f} s")
    else:
        # torch's own barrier after new_group, which the members left:
        # bounded by new_group's timeout.
        check(error is not None, f"non-member {rank}: new_group returned")
        check(took < TIMEOUT.total_seconds() + 10, f"non-member {rank}: took {took:.1f} s")


def late_member(rank: int, n: int) -> None:
    init_torch("distkit", rank, n)
    if rank == 0:
        started = time.monotonic()
        try:
            tdist.new_group([0, 1], timeout=TIMEOUT)
            error = None
        except RuntimeError as e:
            error = str(e)
        took = time.monotonic() - started
        check(error is not None and "not every member arrived" in error,
              f"new_group without rank 1: {error!r}")
        check(took < TIMEOUT.total_seconds() + 5, f"new_group without rank 1 took {took:.1f} s")
        dist.barrier()
    else:
        dist.barrier()  # rank 1 never makes the group


def main():
    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if "--before-join" in sys.argv:
        before_join(rank, n)
        return finish("new_group before distkit joined")
    late_member(rank, n)
    return finish("new_group with a member that never comes")


if __name__ == "__main__":
    sys.exit(main())
