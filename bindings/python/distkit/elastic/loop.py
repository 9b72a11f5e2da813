"""elastic.run: the loop that keeps training through lost ranks.

    elastic.run(train, state)        # or: @elastic.run, then train(state)

The first call on a rank of the original job commits the starting state
(collective). A rank lost in that first commit is recovered from like any
other (data-parallel: each survivor holds the starting state as commit 0; a
sharded model only where that commit's exchange ended on some rank, else
every rank ends with the same clear error). When ``train`` raises an error
that means a peer or a link was lost (UNAVAILABLE, DEADLINE_EXCEEDED,
CANCELLED, ABORTED), each survivor:
1. gets a new default group (membership.py: grown with a replacement, or
   shrunk to the survivors);
2. re-wraps the model on it (``state.model.regroup()`` for distkit's
   wrappers: collective, and the replacement's own construction of its
   wrapper is the matching call);
3. loads the newest committed snapshot held by any member (peer_sync.py),
   so every rank, the replacement included, is at the same commit;
4. calls the state's reset callbacks, then ``train`` again.
A replacement (DISTKIT_REPLACEMENT set) does 3 and 4 before its first call
to ``train``. In a job that shrank, a replacement that came late is grown
back in at the next commit (State.commit raises ReplacementWaiting on every
rank alike; the loop grows, re-wraps and syncs from that commit). Any
other error, or a failure during a recovery after ``max_recoveries``
attempts in a row, is raised to the caller.
"""
import functools
import sys
from typing import Callable, Optional

from .. import dist, errors
from . import membership, peer_sync
from .state import _LOST_PEER, State

_joined = False  # this process (a replacement) has taken its snapshot from a peer


def _say(message: str) -> None:
    print(f"distkit.elastic: rank {dist.get_rank()}: {message}", file=sys.stderr, flush=True)


def _regroup(state: State) -> None:
    regroup = getattr(state.model, "regroup", None)
    if regroup is not None:
        regroup()


def _after_new_world(state: State, how: str) -> None:
    try:
        commit = peer_sync.sync(state)
    except membership.ReplacementWaiting:
        # The state is loaded; the commit that ends a sharded sync found a
        # late replacement waiting (elastic.run grows it in next): this
        # recovery is done all the same.
        state.recoveries += 1
        _say(f"{how}: world of {dist.get_world_size()}, state loaded; a replacement waits")
        state._reset()
        raise
    state.recoveries += 1
    _say(f"{how}: world of {dist.get_world_size()}, training from commit {commit}")
    state._reset()


def run(func: Optional[Callable] = None, state: Optional[State] = None, *,
        replacement_timeout: Optional[float] = None, settle: float = 5.0,
        max_recoveries: int = 3):
    """Runs ``func(state)`` until it returns, recovering from lost ranks (see
    the module's text). ``replacement_timeout``: seconds the survivors wait
    for a replacement (default: the group's timeout); ``settle``: seconds a
    shrink waits for every survivor to report alive: longer than any rank
    may take to notice the loss (its longest step between two collectives),
    else a survivor that notices late is left out and fails. Without
    ``state``, a decorator: ``run(train)(state)``."""
    if state is None:
        if func is None:
            return functools.partial(run, replacement_timeout=replacement_timeout,
                                     settle=settle, max_recoveries=max_recoveries)

        @functools.wraps(func)
        def wrapped(state: State, *args, **kwargs):
            return run(lambda s: func(s, *args, **kwargs), state,
                       replacement_timeout=replacement_timeout, settle=settle,
                       max_recoveries=max_recoveries)
        return wrapped

    global _joined
    joining = membership.is_replacement() and not _joined
    failures_in_a_row = 0
    grow_back = False
    if not joining and state._snapshot is None:
        try:
            state.commit()  # the starting point every rank holds
        except membership.ReplacementWaiting:
            grow_back = True  # a shrunk world: the commit holds, the replacement joins
        except errors.DistkitError as e:
            # max_recoveries=0: no recovery, not even from the first commit.
            if e.code not in _LOST_PEER or max_recoveries <= 0:
                raise
            state._settle(recovering=True)  # an exchange this loss broke
            # A rank lost before anything was committed: this survivor's
            # starting state is the commit to recover from (DDP: every
            # rank's is the same; FSDP: only where that commit's exchange
            # ended, which the members' sync finds out alike).
            state._hold_start()
            failures_in_a_row = 1
            _say(f"lost a peer before the first commit ({e}); recovering from the start")
    while True:
        try:
            if grow_back:
                # From the commit just taken: nothing is trained twice.
                grow_back = False
                dist.grow_group(timeout=replacement_timeout)
                _regroup(state)
                _after_new_world(state, "grown back")
            if joining:
                # The replacement's first step: the state from its peers. A
                # failure here (a second rank lost) is recovered from as a
                # member of the grown world, like any survivor's.
                _after_new_world(state, "joined as a replacement")
                joining, _joined = False, True
            elif failures_in_a_row:
                how, _ = membership.new_world(replacement_timeout, settle)
                _regroup(state)
                _after_new_world(state, how)
                failures_in_a_row = 0
            result = func(state)
            # The last commit whole before returning: its exchange may still
            # run on its thread (a loss there is recovered from like any).
            state._settle()
            return result
        except membership.ReplacementWaiting:
            grow_back = True  # the commit that raised it is whole
            # Raised by train's commit, or by the commit that ends a
            # recovery's sync (a sharded model): that recovery, or this
            # replacement's joining, is done, and the grow back is the
            # next new world; not another shrink, nor a second sync.
            failures_in_a_row = 0
            if joining:
                joining, _joined = False, True
            _say("a replacement waits to join; growing back")
        except errors.DistkitError as e:
            if e.code not in _LOST_PEER or failures_in_a_row >= max_recoveries:
                raise
            # The last commit's copy or exchange, before the re-wrap writes
            # parameters (an exchange this loss broke is not raised again).
            state._settle(recovering=True)
            if joining:
                joining, _joined = False, True
            failures_in_a_row += 1
            _say(f"lost a peer ({e}); recovering")
