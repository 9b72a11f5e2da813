"""distkit.dist on what a second review found (world sizes 2 and 3; rank 1
is the odd one out, every other rank does what rank 0 does):
all_gather_object refused on one rank ends its peers' call at once; a
refusal's reason is attached to that call's disagreement only, not to a
later one; a refused collect_results leaves no temporary directory; a
collective on a group this rank is not in is a FailedPreconditionError;
an asynchronous collective that failed by its own timeout, or whose copy
back raised, reports it through exception() and is_success()."""
import datetime
import os
import pathlib
import sys
import tempfile
import time
import traceback

import torch

from distkit import dist, errors
from distkit.dist.work import Work
from testing.python.rank_check import check, finish

QUICK = 10  # seconds: a peer that is told takes well under this


def outcome(call):
    """(the error ``call`` raised or None, seconds it took)."""
    start = time.monotonic()
    try:
        call()
        return None, time.monotonic() - start
    except Exception as e:  # noqa: BLE001 - the test looks at it
        return e, time.monotonic() - start


def in_step(what, n):
    """The default group still pairs collectives after ``what``."""
    t = torch.ones(1)
    dist.all_reduce(t)
    check(t.item() == n, f"the group in step after {what}: {t.item()}")


def all_gather_object_refused(rank, n):
    """Item 1: a second positional None is refused on rank 0 (ambiguous);
    the peers' call ends at once, with rank 0's reason."""
    if rank == 0:
        e, took = outcome(lambda: dist.all_gather_object([None] * n, None))
        check(isinstance(e, TypeError) and "ambiguous" in str(e),
              f"rank 0: all_gather_object(list, None): {type(e).__name__}: {e}")
    else:
        e, took = outcome(lambda: dist.all_gather_object([None] * n, 5))
        check(isinstance(e, errors.InvalidArgumentError)
              and "rank 0 refused its call" in str(e) and "ambiguous" in str(e),
              f"rank {rank}: the peer's refusal: {type(e).__name__}: {e}")
    check(took < QUICK, f"all_gather_object's refusal took {took:.1f} s")
    in_step("all_gather_object refused", n)


def stale_reasons(rank, n):
    """Item 2: rank 1 refuses a call; a later disagreement with rank 1 (a
    real program bug: it calls barrier) names no refusal."""
    t = torch.ones(2)
    if rank == 1:
        e, _ = outcome(lambda: dist.all_reduce(t, op="bogus"))
        check(isinstance(e, ValueError) and "bogus" in str(e), f"rank 1's own refusal: {e!r}")
    else:
        e, _ = outcome(lambda: dist.all_reduce(t))
        check(isinstance(e, errors.InvalidArgumentError) and "rank 1 refused" in str(e)
              and "bogus" in str(e), f"rank {rank}: step 1's disagreement: {e!r}")
    if rank == 1:
        e, _ = outcome(dist.barrier)
    else:
        e, _ = outcome(lambda: dist.all_reduce(t))
    check(isinstance(e, errors.InvalidArgumentError) and "ranks disagree" in str(e)
          and "refused" not in str(e), f"rank {rank}: step 2 names no refusal: {e!r}")
    in_step("a refusal and a disagreement", n)

    # Every rank refuses: they meet in the barrier; nothing stays for later.
    e, _ = outcome(lambda: dist.all_reduce(t, op="bogus"))
    check(isinstance(e, ValueError) and "bogus" in str(e) and "refused" not in str(e),
          f"rank {rank}: every rank refused: {e!r}")
    if rank == 1:
        e, _ = outcome(dist.barrier)
    else:
        e, _ = outcome(lambda: dist.all_reduce(t))
    check(isinstance(e, errors.InvalidArgumentError) and "refused" not in str(e),
          f"rank {rank}: after every rank refused, a disagreement names no refusal: {e!r}")
    in_step("every rank refused", n)
    if n < 3:
        return

    # Ranks 1 and 2 refuse, rank 0 does not: 1 and 2 learn from their own
    # barrier's disagreement (item 5: its message) that the other refused
    # too, and drop its reason; a later disagreement with rank 2 names none.
    if rank in (1, 2):
        e, _ = outcome(lambda: dist.all_reduce(t, op="bogus"))
        check(isinstance(e, ValueError) and "refused" not in str(e), f"rank {rank}: {e!r}")
    else:
        e, _ = outcome(lambda: dist.all_reduce(t))
        check(isinstance(e, errors.InvalidArgumentError) and "rank 1 refused" in str(e)
              and "rank 2 refused" in str(e), f"rank {rank}: two ranks refused: {e!r}")
    if rank == 2:
        e, _ = outcome(dist.barrier)
    else:
        e, _ = outcome(lambda: dist.all_reduce(t))
    check(isinstance(e, errors.InvalidArgumentError) and "ranks disagree" in str(e)
          and "refused" not in str(e), f"rank {rank}: after two refused, no refusal: {e!r}")
    in_step("two ranks refused", n)


def collect_results_refused(rank, n):
    """Item 3: rank 1's part cannot be pickled: every rank fails, and rank
    0's temporary directory (.dist_test/tmp*, in its working directory) is
    gone."""
    here = os.getcwd()
    if rank == 0:
        os.chdir(tempfile.mkdtemp(dir=os.environ["TEST_TMPDIR"]))
    try:
        part = [lambda: 0] if rank == 1 else [rank]
        e, took = outcome(lambda: dist.collect_results(part, n))
        check(e is not None and took < QUICK, f"rank {rank}: collect_results refused: {e!r}")
        if rank == 0:
            left = list(pathlib.Path(".dist_test").glob("*"))
            check(left == [], f"a refused collect_results leaves {left}")
    finally:
        os.chdir(here)
    in_step("collect_results refused", n)


def non_member(rank, n):
    """Item 4: on a group this rank is not in (new_group([0]) outside rank
    0), every collective is a FailedPreconditionError; rank 0, its only
    member, gets world-size-1 answers."""
    g = dist.new_group([0])
    t = torch.full((2,), float(rank + 1))
    calls = {
        "broadcast_object_list": lambda: dist.broadcast_object_list([rank], 0, g),
        "gather_object": lambda: dist.gather_object(rank, 0, g),
        "all_gather_object": lambda: dist.all_gather_object(rank, g),
        "broadcast": lambda: dist.broadcast(t, 0, g),
        "all_reduce": lambda: dist.all_reduce(t, group=g),
        "sync_random_seed": lambda: dist.sync_random_seed(g),
    }
    if rank != 0:
        for name, call in calls.items():
            e, _ = outcome(call)
            check(isinstance(e, errors.FailedPreconditionError) and "not a member" in str(e),
                  f"rank {rank}: {name} on a group it is not in: {e!r}")
        check(t.tolist() == [rank + 1.0] * 2, f"a non-member's tensor is untouched: {t}")
    else:
        data = [7]
        dist.broadcast_object_list(data, 0, g)
        check(data == [7], f"member: broadcast_object_list {data}")
        check(dist.gather_object("x", 0, g) == ["x"], "member: gather_object")
        check(dist.all_gather_object("y", g) == ["y"], "member: all_gather_object")
        dist.broadcast(t, 0, g)
        dist.all_reduce(t, group=g)
        check(t.tolist() == [1.0, 1.0], f"member: broadcast / all_reduce {t}")
        check(isinstance(dist.sync_random_seed(g), int), "member: sync_random_seed")
    in_step("collectives on a group some ranks are not in", n)


def then_raises():
    """Item 6b: a copy back that raises in wait(): not a success."""
    def then():
        raise RuntimeError("copy back failed")
    w = Work(None, then=then)
    e, _ = outcome(w.wait)
    check(isinstance(e, RuntimeError), f"wait() raises the copy back's error: {e!r}")
    check(w.is_completed() and not w.is_success() and w.exception() is e,
          f"after it: completed {w.is_completed()} success {w.is_success()} "
          f"exception {w.exception()!r}")


def timed_out_work(rank, n):
    """Item 6: an async all_reduce that rank 1 never joins, on a group with
    a 3 s timeout: wait() raises, then exception() is that error and
    is_success() is False. Rank 1 waits, outside the group, for the others
    to be done (a file), so the failure is the timeout, not a lost peer."""
    quick = dist.new_group(list(range(n)), timeout=datetime.timedelta(seconds=3))
    done = pathlib.Path(os.environ["TEST_TMPDIR"], "timed_out_work_done")
    if rank == 1:
        deadline = time.monotonic() + 60
        while len(list(done.parent.glob(done.name + ".*"))) < n - 1 \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        return
    t = torch.ones(2)
    w = dist.all_reduce(t, group=quick, async_op=True)
    e, took = outcome(w.wait)
    check(isinstance(e, errors.DeadlineExceededError), f"wait() on a timed-out work: {e!r}")
    check(took < 30, f"it took {took:.1f} s")
    check(w.is_completed() and not w.is_success() and w.exception() is e,
          f"after it: completed {w.is_completed()} success {w.is_success()} "
          f"exception {w.exception()!r}")
    again, _ = outcome(w.wait)
    check(again is e, f"a second wait() raises the same error: {again!r}")
    pathlib.Path(f"{done}.{rank}").touch()


def main():
    dist.init_dist("pytorch", backend="gloo", timeout=40)
    rank, n = dist.get_dist_info()
    check((rank, n) == (int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])), "dist info")
    all_gather_object_refused(rank, n)
    stale_reasons(rank, n)
    collect_results_refused(rank, n)
    non_member(rank, n)
    then_raises()
    timed_out_work(rank, n)  # last: the quick group is left failed
    return finish("dist review 2 checks")


if __name__ == "__main__":
    try:
        code = main()
    except Exception:  # noqa: BLE001 - reported, then a failing exit
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
