"""One rank refuses a collective (a bad argument found before the call
starts); every rank's call fails at once, not at the timeout: the refusing
rank with its own error, each peer with the library's disagreement naming
what each rank called plus the refusing rank's reason. The group is usable
afterwards. Cases: an unknown op name, a src outside the group, a tensor the
library refuses locally (not contiguous), an object that cannot be pickled,
a refusal on a subgroup (torch's group on the "distkit" backend, under
init_dist), and every rank refusing (each its own error, no wait).

A rank that fails after the collective completed (an object only it cannot
unpickle, a tensor_list slot it cannot copy into) raises its own error at
once; its peers return normally, and the next collective works everywhere.

Operations time out after 30 s here; each case must end within 5 s."""
import os
import sys
import time

import numpy as np
import torch

from distkit import dist
from distkit.errors import InvalidArgumentError
from testing.python.rank_check import check, finish

TIMEOUT_S, PROMPT_S = 30, 5.0


def usable(group, members, what):
    """A collective with values from every member after the failure."""
    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t, group=group)
    want = sum(m + 1 for m in members)
    check(t.item() == want, f"{what}: all_reduce after the refusal gave {t.item()}, not {want}")


def case(what, refuser, call, own_text, group=None, members=None):
    """Everyone calls ``call(refusing)``; ``refuser`` (a global rank, or
    'all') passes the bad argument."""
    rank, n = dist.get_rank(), dist.get_world_size()
    members = list(range(n)) if members is None else members
    if rank not in members:
        return
    refusing = refuser == "all" or rank == refuser
    start = time.monotonic()
    try:
        call(refusing)
        check(False, f"{what}: rank {rank}'s call succeeded")
    except Exception as e:  # noqa: BLE001 - the type is what is checked
        took, text = time.monotonic() - start, str(e)
        check(took < PROMPT_S, f"{what}: rank {rank} waited {took:.1f} s for its error: {text}")
        if refusing:
            check(own_text in text and "ranks disagree" not in text,
                  f"{what}: the refusing rank's own error: {type(e).__name__}: {text}")
        else:
            who = members.index(refuser) if group is not None else refuser
            check(isinstance(e, InvalidArgumentError) and "ranks disagree" in text and
                  f"rank {who} refused its call before it started" in text and own_text in text,
                  f"{what}: rank {rank}'s error names the refusing rank and why: "
                  f"{type(e).__name__}: {text}")
    usable(group, members, what)


def _unpickle_on(rank):
    if os.environ.get("RANK") == str(rank):
        raise RuntimeError(f"rank {rank} cannot unpickle this")
    return "unpickled"


class OnlyOneCannotLoad:
    """Pickles everywhere; unpickles everywhere but on global rank ``rank``."""

    def __init__(self, rank):
        self.rank = rank

    def __reduce__(self):
        return _unpickle_on, (self.rank,)


def after_case(what, failer, call, own_text):
    """Everyone calls ``call(failing)``; on ``failer`` it fails after the
    library call completed: that rank raises promptly, the others return."""
    rank, n = dist.get_rank(), dist.get_world_size()
    start = time.monotonic()
    try:
        call(rank == failer)
        check(rank != failer, f"{what}: rank {rank}'s call succeeded")
    except Exception as e:  # noqa: BLE001 - the type is what is checked
        check(rank == failer and own_text in str(e) and "ranks disagree" not in str(e),
              f"{what}: rank {rank}: {type(e).__name__}: {e}")
    took = time.monotonic() - start
    check(took < PROMPT_S, f"{what}: rank {rank} took {took:.1f} s")
    usable(None, list(range(n)), what)
    usable(None, list(range(n)), what + " (again)")


def main():
    dist.init_dist("pytorch", backend="gloo", timeout=TIMEOUT_S)
    n = dist.get_world_size()
    last = n - 1
    t = torch.ones(4)
    case("unknown op", 0, lambda bad: dist.all_reduce(t, op="bogus" if bad else "sum"),
         "reduce op should be one of")
    case("src outside the group", last,
         lambda bad: dist.broadcast(t, src=n + 5 if bad else 0), f"Global rank {n + 5}")
    # torch tensors of any layout are taken (as Gloo takes them); a strided
    # numpy array is not.
    case("not contiguous", 0, lambda bad: dist.all_reduce(
        np.ones((4, 2)).T if bad else np.ones(8)), "tensor is not contiguous")
    case("object that cannot be pickled", last,
         lambda bad: dist.all_gather_object((lambda: 0) if bad else 0), "pickle")
    pair = dist.new_group([0, last])  # torch's group, on distkit's backend
    case("on a subgroup", last, lambda bad: dist.broadcast(
        t, src=n + 5 if bad else 0, group=pair), f"Global rank {n + 5}",
         group=pair, members=[0, last])
    case("every rank", "all", lambda bad: dist.all_reduce(t, op="bogus"),
         "reduce op should be one of")
    after_case("an object only one rank cannot unpickle", last,
               lambda _: dist.all_gather_object(OnlyOneCannotLoad(last)),
               f"rank {last} cannot unpickle this")
    after_case("gather_object to a rank that cannot unpickle", last,
               lambda _: dist.gather_object(OnlyOneCannotLoad(last), dst=last),
               f"rank {last} cannot unpickle this")
    after_case("a tensor_list slot one rank cannot fill", last,
               lambda bad: dist.all_gather([torch.zeros(3 if bad else 4) for _ in range(n)], t),
               "size of tensor")
    status = finish("a collective one rank refuses fails on every rank")
    dist.destroy()
    return status


if __name__ == "__main__":
    sys.exit(main())
