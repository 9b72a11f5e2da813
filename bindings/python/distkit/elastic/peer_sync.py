"""After a change of membership, every rank gets the newest committed
snapshot from its peers' memory: the members agree on who holds what (a
commit number each, -1 for a replacement, which holds none), and the newest
commit wins: a survivor whose last step completed and committed while
others failed in it holds a newer snapshot than they do, so no completed
step is trained twice with other data.

Data-parallel: the whole snapshot is broadcast from the first rank that
holds the newest commit. Sharded (FullyShardedDataParallel): that rank
broadcasts what every rank's snapshot holds alike (counters, sampler, RNG
states), and the shards travel from the ranks that hold them to the ranks
that need them (sharded_snapshot.py); then every rank commits again, so each
shard of the new layout has its neighbour's copy at once.
"""
import io

import torch

from .. import dist
from . import sharded_snapshot
from .state import State


def _serialize(snapshot) -> bytes:
    buffer = io.BytesIO()
    torch.save(snapshot, buffer)  # to memory: no file is written
    return buffer.getvalue()


def _holders(info, newest: int, old_world: int):
    """Shard index -> the rank that sends it (its owner if it survived, else
    the lowest rank with a copy), and rank -> the shards it holds."""
    held_by = {r: set(held) if commit == newest else set()
               for r, (commit, _, _, held) in enumerate(info)}
    holders = {}
    for j in range(old_world):
        owners = [r for r, (commit, _, own, _) in enumerate(info) if commit == newest and own == j]
        copies = [r for r in range(len(info)) if j in held_by[r]]
        if not owners and not copies:
            raise RuntimeError(
                f"distkit.elastic: shard {j} of commit {newest} is lost: the rank that held it "
                f"and the neighbour that copied it (rank {(j - 1) % old_world} of the "
                f"{old_world}) both failed")
        holders[j] = owners[0] if owners else copies[0]
    return holders, held_by


def sync(state: State) -> int:
    """Collective over the default group; returns the commit loaded."""
    sharded = sharded_snapshot.is_sharded(state.model)
    snapshot = state._snapshot
    mine = snapshot["commit"] if snapshot is not None else -1
    if sharded and snapshot is not None:
        card = (mine, snapshot["world"], snapshot["own"], sorted(snapshot["shards"]))
    else:
        card = (mine, 0, -1, [])
    info = dist.all_gather_object(card)
    newest = max(c[0] for c in info)
    if newest < 0:
        raise RuntimeError("distkit.elastic: no rank holds a committed snapshot "
                           "(call elastic.run before training, or State.commit)")
    source = [c[0] for c in info].index(newest)
    me = dist.get_rank()
    if sharded and me == source:
        common = {k: v for k, v in snapshot.items() if k != "shards"}
    else:
        common = snapshot
    payload = [_serialize(common) if me == source else None]
    dist.broadcast_object_list(payload, source)
    received = common if me == source else torch.load(io.BytesIO(payload[0]))
    if not sharded:
        state._apply(received)
        return newest
    old_world = info[source][1]
    holders, held_by = _holders(info, newest, old_world)
    held = snapshot["shards"] if info[me][0] == newest else {}
    sharded_snapshot.load(state.model, state.optimizer, held, old_world, holders, held_by)
    state._apply_common(received)
    state._snapshot = None
    state._commits = newest - 1
    state.commit()  # the new layout's own shards and neighbour copies
    return newest
