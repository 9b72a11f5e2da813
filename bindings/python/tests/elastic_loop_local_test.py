"""elastic.run's recovery order in one process, its collaborators (the new
world, the grow, the peer sync, train) replaced by recorders: a
ReplacementWaiting raised by the commit that ends a recovery's sync (a
sharded model's peer sync commits the new layout) leads to one grow back and
one sync, never to a second shrink (the shrink and the grow back count as
the two recoveries they are), and a replacement that meets it while
joining syncs once, not again after the grow. Also: a peer lost in run's
first commit is recovered from only where max_recoveries allows one."""
import sys

from distkit import errors
from distkit.elastic import loop, membership, peer_sync


class FakeState:
    def __init__(self):
        self._snapshot = object()  # committed already: run() skips the first commit
        self.recoveries = 0
        self.model = None

    def _settle(self, recovering=False):
        pass

    def _reset(self):
        pass


def scenario(joining: bool):
    calls = []
    syncs = {"n": 0}

    def sync(state):
        syncs["n"] += 1
        calls.append("sync")
        if syncs["n"] == 1:
            # The commit that ends this sync finds a late replacement.
            raise membership.ReplacementWaiting("a replacement waits")
        return 7

    def new_world(timeout, settle):
        calls.append("new_world")
        return "shrunk", None

    def grow_group(timeout=None):
        calls.append("grow")

    trains = {"n": 0}

    def train(state):
        trains["n"] += 1
        calls.append("train")
        if not joining and trains["n"] == 1:
            raise errors.error_for(14, "a peer was lost")  # UNAVAILABLE
        return "done"

    originals = (peer_sync.sync, membership.new_world, membership.is_replacement,
                 loop.dist.grow_group, loop.dist.get_rank, loop.dist.get_world_size)
    peer_sync.sync = sync
    membership.new_world = new_world
    membership.is_replacement = lambda: joining
    loop.dist.grow_group = grow_group
    loop.dist.get_rank = lambda group=None: 0
    loop.dist.get_world_size = lambda group=None: 2
    loop._joined = False
    state = FakeState()
    try:
        result = loop.run(train, state, max_recoveries=3)
    finally:
        (peer_sync.sync, membership.new_world, membership.is_replacement,
         loop.dist.grow_group, loop.dist.get_rank, loop.dist.get_world_size) = originals
    return result, calls, state.recoveries


def first_commit_lost(max_recoveries: int):
    """A peer lost in run's first commit: what run does with `max_recoveries`
    (the error raised, or the calls of the recovery it made)."""
    calls = []

    class NothingCommitted(FakeState):
        def __init__(self):
            super().__init__()
            self._snapshot = None  # run() commits first

        def commit(self):
            calls.append("commit")
            raise errors.error_for(14, "a peer was lost")  # UNAVAILABLE

        def _hold_start(self):
            calls.append("hold_start")

    def new_world(timeout, settle):
        calls.append("new_world")
        return "shrunk", None

    def sync(state):
        calls.append("sync")
        return 0

    def train(state):
        calls.append("train")
        return "done"

    originals = (peer_sync.sync, membership.new_world, membership.is_replacement,
                 loop.dist.get_rank, loop.dist.get_world_size)
    peer_sync.sync = sync
    membership.new_world = new_world
    membership.is_replacement = lambda: False
    loop.dist.get_rank = lambda group=None: 0
    loop.dist.get_world_size = lambda group=None: 2
    loop._joined = False
    try:
        try:
            outcome = loop.run(train, NothingCommitted(), max_recoveries=max_recoveries)
        except errors.DistkitError as e:
            outcome = e.code
    finally:
        (peer_sync.sync, membership.new_world, membership.is_replacement,
         loop.dist.get_rank, loop.dist.get_world_size) = originals
    return outcome, calls


def main():
    # max_recoveries=0 recovers from nothing, the first commit included
    # (it shrank and trained on before); 1 recovers from it once.
    outcome, calls = first_commit_lost(0)
    assert outcome == errors.UNAVAILABLE and calls == ["commit"], \
        f"max_recoveries=0: {outcome}, {calls}"
    outcome, calls = first_commit_lost(1)
    want = ["commit", "hold_start", "new_world", "sync", "train"]
    assert outcome == "done" and calls == want, f"max_recoveries=1: {outcome}, {calls}"
    result, calls, recoveries = scenario(joining=False)
    want = ["train", "new_world", "sync", "grow", "sync", "train"]
    assert result == "done" and calls == want, f"survivor: {calls}, want {want}"
    # The shrink (its state loaded before the commit found the replacement)
    # and the grow back.
    assert recoveries == 2, f"survivor: {recoveries} recoveries, want 2"
    result, calls, recoveries = scenario(joining=True)
    want = ["sync", "grow", "sync", "train"]
    assert result == "done" and calls == want, f"replacement: {calls}, want {want}"
    print("elastic loop: a grow back after a recovery's commit is the only new world")


if __name__ == "__main__":
    sys.exit(main())
