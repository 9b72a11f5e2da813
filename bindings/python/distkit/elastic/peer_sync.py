"""After a change of membership, every rank gets the newest committed
snapshot from a peer's memory: the survivors agree on who holds it (a commit
number each, -1 for a replacement, which holds none), that rank broadcasts
it, and every rank loads it. A survivor whose last step completed and
committed while others failed in it holds a newer snapshot than they do;
the newest wins, so no completed step is trained twice with different data.
"""
import io

import torch

from .. import dist
from .state import State


def _serialize(snapshot) -> bytes:
    buffer = io.BytesIO()
    torch.save(snapshot, buffer)  # to memory: no file is written
    return buffer.getvalue()


def sync(state: State) -> int:
    """Collective over the default group; returns the commit loaded."""
    mine = state._snapshot["commit"] if state._snapshot is not None else -1
    commits = dist.all_gather_object(mine)
    newest = max(commits)
    if newest < 0:
        raise RuntimeError("distkit.elastic: no rank holds a committed snapshot "
                           "(call elastic.run before training, or State.commit)")
    source = commits.index(newest)
    payload = [_serialize(state._snapshot) if dist.get_rank() == source else None]
    dist.broadcast_object_list(payload, source)
    snapshot = state._snapshot if dist.get_rank() == source else torch.load(io.BytesIO(payload[0]))
    state._apply(snapshot)
    return newest
