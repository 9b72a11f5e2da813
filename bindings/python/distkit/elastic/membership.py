"""The survivors' new world after a lost rank: grown back to the job's size
when the launcher starts a replacement (``distrun --max-replacements K``
exports DISTKIT_MAX_REPLACEMENTS=K), else shrunk to the survivors.

Under ``--max-replacements`` the survivors wait for the replacement at most
``replacement_timeout``; when none came, they shrink instead, but only where
the launcher lets the job go on without the lost rank (``distrun --min-ranks
M`` exports DISTKIT_MIN_RANKS=M): otherwise the launcher is stopping the job
and the grow's error is the answer. A replacement that comes after they
shrank is grown back in at the next commit (replacement_waiting)."""
import os
from typing import Optional, Tuple

import torch

from .. import dist, errors


class ReplacementWaiting(Exception):
    """Raised by State.commit in a shrunk job when a replacement that came
    late waits to join: elastic.run grows it back in from that commit."""


def _launcher_number(name: str) -> int:
    try:
        return int(os.environ.get(name, "0"))
    except ValueError:
        return 0


def replacements_expected() -> bool:
    return _launcher_number("DISTKIT_MAX_REPLACEMENTS") > 0


def shrink_allowed() -> bool:
    """False only where a replacement is expected and the launcher has not
    said that the job may go on smaller."""
    return not replacements_expected() or _launcher_number("DISTKIT_MIN_RANKS") > 0


def job_world_size() -> int:
    """The size the job started with (the launcher's WORLD_SIZE)."""
    return _launcher_number("WORLD_SIZE") or dist.get_world_size()


def replacement_waiting() -> bool:
    """Collective over the default group, where the job shrank and
    replacements may come: whether one waits to join now (any rank saw it:
    every rank gets the same answer). Else False, without communication."""
    if not replacements_expected() or dist.get_world_size() >= job_world_size():
        return False
    seen = torch.tensor([1.0 if dist.grow_pending() else 0.0])
    dist.all_reduce(seen, op="max")
    return bool(seen.item())


def is_replacement() -> bool:
    """True in a process the launcher started in place of a lost rank."""
    return _launcher_number("DISTKIT_REPLACEMENT") > 0


def new_world(replacement_timeout: Optional[float], settle: float) -> Tuple[str, "dist.ProcessGroup"]:
    """Collective among the survivors of the default group's failure: makes
    the new default group and says how ("grown" or "shrunk")."""
    if replacements_expected():
        try:
            return "grown", dist.grow_group(timeout=replacement_timeout)
        except errors.DeadlineExceededError as e:
            if not shrink_allowed():
                # Not a lost peer to recover from again: no replacement came
                # and the job may not go on smaller (waiting again would
                # only multiply the timeout).
                raise RuntimeError(
                    "distkit.elastic: no replacement joined within the grow's timeout, and "
                    "the launcher does not let the job go on smaller (distrun --min-ranks): "
                    f"{e}") from e
    return "shrunk", dist.shrink_group(settle=settle)
