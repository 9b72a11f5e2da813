"""State: what a job needs to go on after a lost rank, kept in memory.

``commit()`` takes a snapshot at a point where every rank is at the same step
(the caller's choice, e.g. every k steps): the model's and the optimizer's
state, the sampler's position, the caller's counters and every rank's RNG
states. Nothing is written to a file. For data-parallel training each rank's
snapshot is a full copy, so after a failure any survivor can hand it to a
replacement (peer_sync.py); a FullyShardedDataParallel model's shards are
kept twice, each also by its neighbour (sharded_snapshot.py). ``restore()``
puts a rank back to its snapshot.
"""
import copy
import os
import random
import sys
import threading
import types
import weakref
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from .. import dist, errors
from ..fsdp import FullyShardedDataParallel, StateDictType
from . import membership, sharded_snapshot

# The errors of a lost peer or link, from which elastic.run recovers.
_LOST_PEER = (errors.UNAVAILABLE, errors.DEADLINE_EXCEEDED, errors.CANCELLED, errors.ABORTED)


def _rng_states() -> Dict[str, Any]:
    states = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = [s.cpu() for s in torch.cuda.get_rng_state_all()]
    numpy = sys.modules.get("numpy")  # only when the trainer uses it
    if numpy is not None:
        states["numpy"] = numpy.random.get_state()
    return states


def _set_rng_states(states: Dict[str, Any]) -> None:
    torch.set_rng_state(states["torch"])
    random.setstate(states["python"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
    numpy = sys.modules.get("numpy")
    if numpy is not None and "numpy" in states:
        numpy.random.set_state(states["numpy"])


def _check_model(model) -> None:
    """The models whose state elastic.State knows how to keep: plain or
    data-parallel ones (each rank holds all of it), and a
    FullyShardedDataParallel at the top (each rank holds its shards). A
    model sharded some other way would be snapshotted as if whole."""
    if model is None or sharded_snapshot.is_sharded(model):
        return
    from ..fsdp import FSDPModule
    for name, m in model.named_modules():
        if isinstance(m, (FullyShardedDataParallel, FSDPModule)):
            raise ValueError(
                f"elastic.State: '{name or type(model).__name__}' is sharded "
                f"({type(m).__name__}) inside a model that is not a FullyShardedDataParallel: "
                "wrap the whole model in FullyShardedDataParallel (its units by "
                "auto_wrap_policy) so its shards can be snapshotted and rebuilt")


def job_rank() -> int:
    """This process's place in the job as the launcher numbered it: kept
    through a shrink (which renumbers the group) and given to a
    replacement."""
    return int(os.environ.get("RANK", dist.get_rank()))


def _tensor_bytes(obj) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(_tensor_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_tensor_bytes(v) for v in obj)
    return 0


def _deferrable(t: torch.Tensor) -> bool:
    """Whether `t` may be copied later by the background thread: host
    memory. A device tensor's clone is queued on the caller's stream now
    (asynchronous already, and ordered before the next step's work there)."""
    return t.device.type == "cpu"


def _containers(obj, slots: List[Tuple[Any, Any]]):
    """`obj` with every dict and list copied and every host tensor in them
    kept by reference, its (container, key) added to `slots` (cloned later,
    _BackgroundCopy); anything else (a tuple too: it cannot be filled in
    later) copied now."""
    if isinstance(obj, dict):
        out = {}
        for key, value in obj.items():
            out[key] = _containers(value, slots)
            if isinstance(value, torch.Tensor) and _deferrable(value):
                slots.append((out, key))
        return out
    if isinstance(obj, list):
        out = [_containers(v, slots) for v in obj]
        slots.extend((out, i) for i, v in enumerate(obj)
                     if isinstance(v, torch.Tensor) and _deferrable(v))
        return out
    if isinstance(obj, torch.Tensor):
        return obj.detach() if _deferrable(obj) else obj.detach().clone()
    return copy.deepcopy(obj)


class _OnItsThread:
    """A commit's work (``_work``) on a thread of its own while the caller
    goes on; ``_join`` waits and gives what it raised, if anything."""

    def _start(self, name: str) -> None:
        self._error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._work()
        except BaseException as e:  # noqa: BLE001 - given to the waiter by _join
            self._error = e

    def _join(self) -> Optional[BaseException]:
        self._thread.join()
        return self._error


class _BackgroundCopy(_OnItsThread):
    """Clones the tensors at `slots` in place, on a thread of its own, while
    the caller goes on (torch's copies release the GIL). Nothing may change
    those tensors until wait() returns: State waits before the optimizer's
    next step, which is what changes parameters and optimizer state."""

    def __init__(self, slots: List[Tuple[Any, Any]]):
        self._slots = slots
        self._start("distkit-elastic-commit")

    def _work(self) -> None:
        with torch.no_grad():
            for container, key in self._slots:
                container[key] = container[key].detach().clone()

    def wait(self) -> None:
        error = self._join()
        if error is not None:
            raise RuntimeError(f"distkit.elastic: the commit's copy failed: {error}") from error


class _BackgroundExchange(_OnItsThread):
    """A sharded commit's exchange, on a thread of its own while training
    goes on: this rank's shard (already copied) to its neighbour and the
    neighbour's here, over `group` (the state's own group over the same
    ranks as the default group, so that its collectives never interleave
    with the training's), then the barrier that confirms the commit on every
    rank. The snapshot is pending from the exchange's end and in force from
    the barrier's, as in the synchronous commit."""

    def __init__(self, state: "State", snapshot: Dict[str, Any], own: Dict[str, Any], group,
                 device: Optional[torch.device]):
        self._state, self._snapshot, self._own, self._group = state, snapshot, own, group
        self._device = device
        # The shard's copy was queued on the caller's stream: the thread's
        # own copies of it wait for that point.
        self._ready = None
        if device is not None:
            self._ready = torch.cuda.Event()
            self._ready.record(torch.cuda.current_stream(device))
        self._start("distkit-elastic-exchange")

    def _work(self) -> None:
        if self._ready is not None:
            self._ready.synchronize()
        snapshot = self._snapshot
        snapshot["shards"] = sharded_snapshot.with_neighbour(
            self._own, snapshot["world"], snapshot["own"], self._group, self._device)
        self._state._pending = snapshot
        dist.barrier(group=self._group)
        self._state._pending = None
        self._state._held = snapshot

    def abort(self) -> bool:
        """A member was lost: the exchange cannot complete (its group holds
        every member) and must not wait out the group's timeout. Local.
        Whether it aborted the group (the thread still ran)."""
        if self._thread.is_alive():
            self._group.abort()
            return True
        return False

    def wait(self) -> None:
        """Raises the exchange's error as it was (a lost peer keeps its
        code: the caller may be recovering from that loss already)."""
        error = self._join()
        if error is not None:
            raise error


class State:
    """The training state ``elastic.run`` keeps alive.

    ``model``: a module (a distkit wrapper is re-wrapped on the new group
    after a failure); ``optimizer``: a torch optimizer; ``sampler``: an
    ElasticSampler (or anything with ``state_dict`` / ``load_state_dict``);
    keyword ``counters`` (epoch, step, ...) become attributes, saved and
    restored with the rest.

    ``overlap_commit`` (default None). A data-parallel model's parameters
    that ``optimizer`` steps and its state are copied by a background
    thread while the next step's forward and backward run, and the
    optimizer's next ``step()`` waits for the copy (the buffers, the
    counters, the sampler and the RNG states are copied at once); unless
    ``overlap_commit=False``, which code that changes parameters in place
    outside ``optimizer.step()`` between a commit and the next step needs.
    A sharded model's commit exchanges shards with the neighbours inside
    ``commit()``; with ``overlap_commit=True`` it copies this rank's shard
    at once and runs the exchange on a thread of its own (over a group of
    the state's, beside the training's collectives), confirmed there by a
    barrier, and the next commit, a recovery or the end of ``elastic.run``
    waits for it. Not on a pure NCCL world (its group would be a second
    NCCL communicator beside the training's, which NCCL does not order),
    and not by default: with the steps on busy CPU cores the thread takes
    their time instead (tools/dkbench/RESULTS.md, "FSDP's commit in the
    background"), and the GPU case is not measured yet."""

    def __init__(self, model: Optional[torch.nn.Module] = None,
                 optimizer: Optional[torch.optim.Optimizer] = None, sampler=None,
                 overlap_commit: Optional[bool] = None, **counters):
        _check_model(model)
        self.model = model
        self.optimizer = optimizer
        self.sampler = sampler
        self._counter_names = list(counters)
        for name, value in counters.items():
            setattr(self, name, value)
        sharded = sharded_snapshot.is_sharded(model)
        # Only with an optimizer, whose step is what waits for the copy.
        self._overlap = overlap_commit is not False and optimizer is not None and not sharded
        # Asked for; each commit decides with the others (_exchange_beside).
        self._overlap_exchange = sharded and overlap_commit is True
        # The group the exchange runs over, made over the default group
        # (held weakly: a new world after a recovery gets a new one).
        self._exchange_group = None
        self._exchange_world: Optional[weakref.ref] = None
        self._held: Optional[Dict[str, Any]] = None
        self._copying: Optional[_BackgroundCopy] = None  # the held snapshot's tensors
        self._deferred: List[Tuple[Any, Any]] = []  # _capture's tensors still referenced
        if optimizer is not None and self._overlap:
            self._guard_step(optimizer)
        self._pending: Optional[Dict[str, Any]] = None  # a sharded commit not confirmed
        self._commits = 0
        self._reset_callbacks: List[Callable[["State"], None]] = []
        # Filled by elastic.run: how many recoveries this process took part in.
        self.recoveries = 0

    def register_reset_callbacks(self, callbacks: List[Callable[["State"], None]]) -> None:
        """Each is called with the state after every change of membership
        (a shrink or a grow), once the state is restored on the new world."""
        self._reset_callbacks.extend(callbacks)

    def _guard_step(self, optimizer) -> None:
        """The optimizer's step waits for a commit's copy first (it changes
        what is being copied). A bound method, as torch's LR schedulers
        expect when they wrap ``step`` in turn."""
        original = optimizer.step  # bound, or a scheduler's wrapper
        state = weakref.ref(self)

        def step_after_copy(_optimizer, *args, **kwargs):
            held = state()
            if held is not None:
                held._settle()
            return original(*args, **kwargs)
        # A scheduler that wrapped step already must not wrap it twice.
        for marker in ("_with_counter", "_wrapped_by_lr_sched"):
            if hasattr(original, marker):
                setattr(step_after_copy, marker, getattr(original, marker))
        optimizer.step = types.MethodType(step_after_copy, optimizer)

    def _settle(self, recovering: bool = False) -> None:
        """Waits until the held snapshot's tensors are copies (DDP) or its
        shards exchanged and confirmed (FSDP). A copy that failed leaves no
        snapshot in force on this rank (its tensors would be the live
        ones): the error (not a lost peer's) is raised here once and out of
        elastic.run, so this process ends, and its peers recover from its
        loss as from any (a replacement takes the snapshot from a peer).
        An exchange that failed leaves the last
        snapshot in force and this one pending or not taken; its error is
        raised too, but not to a recovery from a lost peer (``recovering``),
        which that loss is (the members then agree on what they hold)."""
        copying, self._copying = self._copying, None
        if copying is None:
            return
        aborted = False
        if recovering and isinstance(copying, _BackgroundExchange):
            # What it had (pending) stays; the barrier cannot pass.
            aborted = copying.abort()
        try:
            copying.wait()
        except errors.DistkitError as e:
            # After that abort the exchange's next call on its group is
            # refused (FAILED_PRECONDITION: the group was aborted) when the
            # thread had not yet reached it: that too is the loss.
            expected = e.code in _LOST_PEER or (aborted and e.code == errors.FAILED_PRECONDITION)
            if not (recovering and expected):
                raise
        except RuntimeError:
            if isinstance(copying, _BackgroundCopy):
                self._held = None
            raise

    @property
    def _snapshot(self) -> Optional[Dict[str, Any]]:
        """The snapshot in force (whole: its copy finished)."""
        self._settle()
        return self._held

    @_snapshot.setter
    def _snapshot(self, snapshot: Optional[Dict[str, Any]]) -> None:
        self._settle()
        self._held = snapshot

    @property
    def commits(self) -> int:
        """How many snapshots the job has taken (the same on every rank; the
        last may still be confirming on its thread)."""
        return self._commits

    def commit(self) -> None:
        """Collective over the default group (every rank's RNG states are
        gathered, so a replacement gets its lost rank's): takes an in-memory
        snapshot. The previous snapshot stays in force until this one is
        complete, so a failure during a commit restores the previous one;
        except where the copy is deferred (DDP's overlap: the new snapshot
        is in force at once and its tensors are copied beside the next
        step, which waits for them; a recovery waits for them first, and a
        copy that fails ends this rank: see _settle).
        In a job that shrank, a replacement that came late and waits is
        grown back in from here (elastic.run)."""
        self._settle()  # the previous commit's copy or exchange first
        # Every rank's RNG states, and whether it may exchange its shard on
        # a thread: all must, or none does.
        gathered = dist.all_gather_object((job_rank(), _rng_states(), self._exchange_beside()))
        snapshot = self._capture(self._commits + 1)
        snapshot["rng"] = {r: states for r, states, _ in gathered}
        if all(beside for _, _, beside in gathered) and dist.get_world_size() > 1:
            # This rank's shard copied now; the exchange and its
            # confirmation beside the next steps.
            own = sharded_snapshot.capture_own(self.model, self.optimizer)
            snapshot["world"] = dist.get_world_size()
            snapshot["own"] = dist.get_rank()
            self._copying = _BackgroundExchange(self, snapshot, own, self._group_for_exchange(),
                                                sharded_snapshot.device_of(self.model))
        elif sharded_snapshot.is_sharded(self.model):
            # This rank's shard and a copy of its neighbour's (collective).
            snapshot["shards"] = sharded_snapshot.capture(self.model, self.optimizer)
            snapshot["world"] = dist.get_world_size()
            snapshot["own"] = dist.get_rank()
            # In force only once every rank holds its part: a failure before
            # that leaves both this and the last snapshot to recover from
            # (some ranks may have replaced theirs already).
            self._pending = snapshot
            dist.barrier()
        if self._copying is None:  # else the exchange puts it in force
            self._pending = None
            self._snapshot = snapshot
        deferred, self._deferred = self._deferred, []
        if deferred:
            self._copying = _BackgroundCopy(deferred)
        self._commits += 1
        if membership.replacement_waiting():
            # elastic.run grows it in from this commit: whole first (a loss
            # in the exchange comes out of commit() like any lost peer).
            self._settle()
            raise membership.ReplacementWaiting()

    def _exchange_beside(self) -> bool:
        """Whether this rank may exchange its shard on a thread: asked for,
        and the world carries host memory on a host transport. A pure NCCL
        world would make the exchange's group a second NCCL communicator
        used beside the training's, which NCCL does not order: the exchange
        stays inside commit() there."""
        return self._overlap_exchange and dist.groups.transport(
            dist.groups.library_default_group()) != "nccl"

    def _group_for_exchange(self):
        """The state's own group over the default group's ranks (collective
        when the default group changed, at a commit: every rank alike)."""
        world = dist.groups.library_default_group()
        if self._exchange_world is None or self._exchange_world() is not world:
            self._exchange_group = None  # the old world's, if any
            self._exchange_group = dist.new_group(range(world.size()), group=world)
            self._exchange_world = weakref.ref(world)
        return self._exchange_group

    def restore(self) -> None:
        """Puts this rank back to the last committed snapshot, in the world
        it was taken in (after a change of membership elastic.run loads the
        members' newest commit instead)."""
        if self._snapshot is None:
            raise RuntimeError("elastic.State.restore: nothing committed yet")
        self._apply(self._snapshot)

    def snapshot_bytes(self, model_only: bool = False) -> int:
        """The memory the snapshot's tensors hold on this rank; with
        ``model_only``, those of the model's and the optimizer's state alone
        (a sharded model: this rank's shard and its neighbour's), without
        the RNG states."""
        if self._snapshot is None:
            return 0
        if model_only:
            return sum(_tensor_bytes(self._snapshot.get(k)) for k in ("model", "optimizer", "shards"))
        return _tensor_bytes(self._snapshot)

    # -- for peer_sync and loop -------------------------------------------------------

    def _hold_start(self) -> None:
        """After the first commit failed with a lost peer: the state as it
        is (nothing trained yet) becomes commit 0, held by this rank alone;
        the recovery's sync hands the first survivor's to every member. A
        sharded model holds nothing here: its lost rank's shard of the start
        was copied to a neighbour only if that commit's exchange ended
        somewhere, and the members' sync decides alike on every rank (it
        recovers from such a pending commit, or says that none is held)."""
        if sharded_snapshot.is_sharded(self.model):
            return
        overlap, self._overlap = self._overlap, False  # copies now: nothing will wait
        try:
            snapshot = self._capture(0)
        finally:
            self._overlap = overlap
        snapshot["rng"] = {job_rank(): _rng_states()}
        self._snapshot = snapshot

    def _capture(self, commit: int) -> Dict[str, Any]:
        snapshot: Dict[str, Any] = {"commit": commit,
                                    "counters": {n: copy.deepcopy(getattr(self, n))
                                                 for n in self._counter_names}}
        self._deferred = []
        if self.model is not None and not sharded_snapshot.is_sharded(self.model):
            # The parameters the optimizer steps (its step waits for the
            # copy) by reference when the copy overlaps; everything else,
            # buffers included (a forward may change them), now.
            params = {p.data_ptr() for group in self.optimizer.param_groups
                      for p in group["params"] if _deferrable(p)} if self._overlap else ()
            snapshot["model"] = {k: v.detach() if v.data_ptr() in params else v.detach().clone()
                                 for k, v in self.model.state_dict().items()}
            self._deferred = [(snapshot["model"], k) for k, v in snapshot["model"].items()
                              if v.data_ptr() in params]
            if self.optimizer is not None:
                if self._overlap:
                    snapshot["optimizer"] = _containers(self.optimizer.state_dict(),
                                                        self._deferred)
                else:
                    snapshot["optimizer"] = copy.deepcopy(self.optimizer.state_dict())
        if self.sampler is not None:
            snapshot["sampler"] = copy.deepcopy(self.sampler.state_dict())
        return snapshot

    def _apply(self, snapshot: Dict[str, Any]) -> None:
        """Loads `snapshot` (committed by this rank or received from a peer
        in the same layout), with this process's RNG states from it."""
        if sharded_snapshot.is_sharded(self.model):
            own = snapshot["shards"][snapshot["own"]]
            with FullyShardedDataParallel.state_dict_type(self.model,
                                                          StateDictType.SHARDED_STATE_DICT):
                self.model.load_state_dict(own["model"])
            if self.optimizer is not None:
                # A copy: torch 2.x loads tensors without copying them, and
                # the snapshot must stay as committed.
                self.optimizer.load_state_dict(copy.deepcopy(own["optimizer"]))
        else:
            with torch.no_grad():
                if self.model is not None:
                    self.model.load_state_dict(snapshot["model"])
            if self.optimizer is not None:
                self.optimizer.load_state_dict(copy.deepcopy(snapshot["optimizer"]))
        self._apply_common(snapshot)
        self._snapshot = snapshot

    def _apply_common(self, snapshot: Dict[str, Any]) -> None:
        """What every rank's snapshot holds alike: no stale gradients, the
        sampler's position, the counters, the RNG states, the commit."""
        if self.optimizer is not None:
            self.optimizer.zero_grad(set_to_none=True)
        if self.model is not None:
            self.model.zero_grad(set_to_none=True)  # nothing from a failed step
        if self.sampler is not None:
            self.sampler.load_state_dict(copy.deepcopy(snapshot["sampler"]))
        for name, value in snapshot["counters"].items():
            setattr(self, name, copy.deepcopy(value))
        rng = snapshot.get("rng", {}).get(job_rank())
        if rng is not None:
            _set_rng_states(rng)
        self._commits = snapshot["commit"]

    def _reset(self) -> None:
        for callback in self._reset_callbacks:
            callback(self)
