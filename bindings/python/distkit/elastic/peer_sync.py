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
import inspect
import io

import torch

from .. import dist
from . import sharded_snapshot
from .state import State


def _serialize(snapshot) -> bytes:
    buffer = io.BytesIO()
    torch.save(snapshot, buffer)  # to memory: no file is written
    return buffer.getvalue()


def _deserialize(payload: bytes):
    """The snapshot `_serialize` made. It holds numpy's RNG state, which
    torch >= 2.6's default weights_only=True refuses: weights_only=False where
    torch.load knows the argument (1.13 and later). Tensors load on the CPU
    (the sender's device may not exist here); load_state_dict moves them."""
    buffer = io.BytesIO(payload)
    if "weights_only" in inspect.signature(torch.load).parameters:
        return torch.load(buffer, map_location="cpu", weights_only=False)
    return torch.load(buffer, map_location="cpu")


def _holders(cards, commit: int, world: int):
    """For the members' snapshots of `commit` (`cards`: per rank, a list of
    (commit, world, own shard, held shards)): shard index -> the rank that
    sends it (its owner if it survived, else the lowest rank with a copy),
    and rank -> the shards it holds; None when a shard has no holder."""
    held_by = {r: set().union(*[set(c[3]) for c in mine if c[0] == commit])
               for r, mine in enumerate(cards)}
    holders = {}
    for j in range(world):
        owners = [r for r, mine in enumerate(cards)
                  if any(c[0] == commit and c[2] == j for c in mine)]
        copies = [r for r in range(len(cards)) if j in held_by[r]]
        if not owners and not copies:
            return None
        holders[j] = owners[0] if owners else copies[0]
    return holders, held_by


def _choose_sharded(cards):
    """The newest commit whose shards the members still hold, all of them
    (a commit interrupted by a failure may be held by some ranks only; the
    one before it then still is, as committed or pending)."""
    every = [c for mine in cards for c in mine]
    for commit in sorted({c[0] for c in every}, reverse=True):
        worlds = {c[1] for c in every if c[0] == commit}
        if len(worlds) != 1:  # one commit is one layout; never mix two
            raise RuntimeError(f"distkit.elastic: commit {commit} is held in layouts of "
                               f"{sorted(worlds)} ranks")
        world = worlds.pop()
        found = _holders(cards, commit, world)
        if found is not None:
            return commit, world, found
    newest = max(c[0] for c in every)
    world = next(c[1] for c in every if c[0] == newest)
    lost = [j for j in range(world) if not any(c[0] == newest and j in c[3] for c in every)]
    raise RuntimeError(
        f"distkit.elastic: shard(s) {lost} of commit {newest} are lost: the ranks that held "
        f"them (ranks {lost}) and the neighbours that copied them (ranks "
        f"{[(j - 1) % world for j in lost]}) of the {world} all failed; no older commit is "
        "held whole either")


def sync(state: State) -> int:
    """Collective over the default group; returns the commit loaded."""
    sharded = sharded_snapshot.is_sharded(state.model)
    slots = [s for s in (state._snapshot, state._pending) if s is not None]
    if sharded:
        cards = dist.all_gather_object(
            [(s["commit"], s["world"], s["own"], sorted(s["shards"])) for s in slots])
        if not any(cards):
            raise RuntimeError(
                "distkit.elastic: no rank holds a committed snapshot of the sharded model: "
                "a rank lost before the first commit's exchange ended took its shard of the "
                "starting state with it (no other rank held a copy), so training cannot go "
                "on from memory; restart the job, nothing was trained yet (or, outside "
                "elastic.run, call State.commit before training)")
        chosen, old_world, (holders, held_by) = _choose_sharded(cards)
        source = next(r for r, mine in enumerate(cards) if any(c[0] == chosen for c in mine))
    else:
        commits = dist.all_gather_object(slots[0]["commit"] if slots else -1)
        chosen = max(commits)
        if chosen < 0:
            raise RuntimeError("distkit.elastic: no rank holds a committed snapshot "
                               "(call elastic.run before training, or State.commit)")
        source = commits.index(chosen)
    me = dist.get_rank()
    snapshot = next((s for s in slots if s["commit"] == chosen), None)
    if sharded and me == source:
        common = {k: v for k, v in snapshot.items() if k != "shards"}
    else:
        common = snapshot
    payload = [_serialize(common) if me == source else None]
    dist.broadcast_object_list(payload, source)
    received = common if me == source else _deserialize(payload[0])
    if not sharded:
        state._apply(received)
        return chosen
    held = snapshot["shards"] if snapshot is not None else {}
    sharded_snapshot.load(state.model, state.optimizer, held, old_world, holders, held_by)
    state._apply_common(received)
    # What was loaded is this rank's snapshot until the next commit holds.
    state._snapshot, state._pending = snapshot, None
    # The new layout's own shards and neighbour copies, as a newer commit;
    # until it completes everywhere the one loaded stays whole in the
    # members' memory (a failure here recovers from it).
    state.commit()
    return chosen
