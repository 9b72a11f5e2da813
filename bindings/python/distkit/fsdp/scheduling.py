"""When each unit gathers, frees and reduces: the forward and backward hooks
of one sharded model's units, prefetching, and the reduction of every unit
at the end of backward."""
import collections
import contextlib
import time
from typing import Callable, List, Optional, Sequence, Set

import torch
from torch import nn

from .._lib import lib, raise_for_status
from .options import BackwardPrefetch
from .unit import Unit


class Coordinator:
    """The units of one sharded model: the forward / backward hooks that
    gather and free each unit, and one reduction of every unit at the end of
    backward (in one order on every rank, also for a unit this rank's
    backward did not reach: its gradient counts as zero)."""

    def __init__(self, free_after_backward: bool, forward_prefetch: bool = False,
                 backward_prefetch: Optional["BackwardPrefetch"] = None):
        self.units: List[Unit] = []
        self.forward_prefetch = forward_prefetch
        self.backward_prefetch = backward_prefetch
        self.order: List[Unit] = []     # the last forward's unit order
        self.recording: List[Unit] = []
        self.flat_ids: Set[int] = set()  # the shard parameters: never sharded again
        self.require_sync = True
        self.backward_queued = False
        self.forward_depth = 0  # wrappers' forwards running (run_forward)
        self.in_flight: Optional[Unit] = None  # the unit being reduced
        self.free_after_backward = free_after_backward
        # The units' compute, for take_timeline: (unit, kind, unix_ns), the
        # newest 4096 marks kept.
        self.compute = collections.deque(maxlen=4096)

    def add(self, unit_module: nn.Module, owned: List[tuple], group, config, compute_dtype,
            reshard_after_forward: bool, is_root: bool, orig_params: bool = False,
            aliases: Sequence[tuple] = (), names: Optional[Sequence[str]] = None) -> "Unit":
        unit = Unit(unit_module, owned, group, config, compute_dtype, reshard_after_forward,
                     is_root, orig_params, aliases, names)
        unit.index = len(self.units)
        unit.coordinator = self
        self.units.append(unit)
        self.flat_ids.update(id(p) for p in unit.flat_params)
        # Through unit.coordinator: absorb() may hand the unit to another.
        unit_module.register_forward_pre_hook(
            lambda m, inputs, unit=unit: unit.coordinator._pre_forward(unit))
        unit_module.register_forward_hook(
            lambda m, inputs, output, unit=unit: unit.coordinator._post_forward(unit, output))
        return unit

    def absorb(self, other: "Coordinator") -> None:
        """Takes over `other`'s units (fully_shard on a module above
        several earlier calls, as C++'s FullyShard adopts their units): one
        backward then reduces every unit, also those this rank's backward
        did not reach, in one order on every rank. (Each coordinator
        reduced its own unreached units only where this rank's backward
        reached one of its units: a rank whose loss left one out never
        reduced it, and the ranks' collectives differed.)"""
        if other is self:
            return
        for unit in other.units:
            unit.coordinator = self
            self.units.append(unit)
        self.flat_ids.update(other.flat_ids)
        other.units, other.flat_ids = [], set()
        other.merged_into = self

    def order_by_tree(self, root: nn.Module) -> None:
        """The units in the module tree's order (named_modules order,
        each module after the modules under it, as units_of's; a unit
        outside `root`'s tree first, as it was): the order every rank
        reduces the units its backward did not reach in."""
        position = {}
        counter = [0]

        def visit(module: nn.Module) -> None:  # post-order, every module once
            for child in module.children():
                if id(child) not in position:
                    position[id(child)] = None
                    visit(child)
            position[id(module)] = counter[0]  # one number each: no ties
            counter[0] += 1

        visit(root)
        self.units.sort(key=lambda u: -1 if position.get(id(u.module)) is None
                        else position[id(u.module)])
        for i, unit in enumerate(self.units):
            unit.index = i

    def watch_recompute(self) -> None:
        """After every unit is added: each module a unit's parameter is
        registered on tells, when it runs during backward (reentrant
        checkpoint recomputing), the units whose leaves of this forward it
        uses: those leaves then take gradients in the inner backward and
        maybe in others too, so the units are reduced at the end of
        backward."""
        users = {}
        for unit in self.units:
            for owner, _, _ in list(unit.owned) + list(unit.aliases):
                users.setdefault(id(owner), (owner, []))[1].append(unit)
        for owner, units in users.values():
            owner.register_forward_pre_hook(
                lambda m, inputs, units=tuple(dict.fromkeys(units)): self._recomputing(units))

    def _recomputing(self, units) -> None:
        if self.backward_queued and torch.is_grad_enabled():
            for unit in units:
                if not unit.exposed_in_backward:
                    unit.defer = True

    def forget_backward(self) -> None:
        """After a failed backward (its queued _finish_backward never ran):
        no reduction in flight, none queued, no recorded order, so the next
        forward and backward start afresh (FullyShardedDataParallel.regroup)."""
        self.in_flight = None
        self.backward_queued = False
        self.order, self.recording = [], []
        for unit in self.units:
            unit.users = 0
            unit.in_backward = False

    def _mark(self, unit: "Unit", kind: str) -> None:
        self.compute.append((unit.index, kind, time.time_ns()))

    def run_forward(self, forward: Callable[[], object]):
        """Runs a wrapper's forward (FullyShardedDataParallel's, a
        fully_shard module's). Where the outermost one raises, the
        post-forward hooks of the units it was in never ran: what they held
        is released before the exception goes on (an inner one's caller may
        catch it and go on computing with the enclosing units)."""
        merged_into = getattr(self, "merged_into", None)
        if merged_into is not None:  # absorbed: its units run there
            return merged_into.run_forward(forward)
        self.forward_depth += 1
        try:
            return forward()
        except BaseException:
            if self.forward_depth == 1 and not self.backward_queued:
                self._release_unfinished_forward()  # else backward's end does
            raise
        finally:
            self.forward_depth -= 1

    def _release_unfinished_forward(self) -> None:
        """What a forward that raised left behind, so that memory is back
        to the shards before the caller handles the error (an out-of-memory
        forward retried with a smaller batch) and a change of the shards
        before the next forward (an optimizer step) is what it computes
        with: every unit's full parameters (those it was in, whose users are
        still counted, and those SHARD_GRAD_OP or NO_SHARD's cast copies
        keep after their forward; no backward follows to free them), and
        gathers prefetched for units it never reached. Never raises: a
        unit's cleanup failing (a broken group, likely the forward's own
        error) does not keep the others from theirs, nor replace the
        error."""
        for u in self.units:
            u.users = 0
            try:
                if u.gathered and not u.in_backward and not u.aliased:
                    if u.reshard_after_forward or self.free_after_backward:
                        u.reshard()
                    else:
                        u.gathered = False  # a cast copy: made again
                self._drop_prefetch(u)
            except Exception:  # noqa: BLE001 - see above
                u.gathering = False
        self.recording = []

    def _drop_prefetch(self, unit: "Unit") -> None:
        if unit.gathering:
            raise_for_status(lib.dk_shard_unshard_wait, unit.handle)
            raise_for_status(lib.dk_shard_reshard, unit.handle)
            unit.gathering = False

    def _pre_forward(self, unit: "Unit") -> None:
        if not self.backward_queued:
            if unit.is_root:  # a new forward
                if self.forward_depth <= 1 and any(u.users > 0 for u in self.units):
                    # The last forward raised where no wrapper's forward saw
                    # it (the wrapped module called itself). (At the root's
                    # start a finished forward left no user counted.)
                    self._release_unfinished_forward()
                for u in self.units:
                    u.forward_calls = 0
            unit.forward_calls += 1
        elif torch.is_grad_enabled():
            # Reentrant checkpoint recomputing the unit: fresh leaves, whose
            # gradients come in this inner backward. A unit its forward ran
            # several times is recomputed as often, each time with
            # gradients for the same shard: reduced at the end of backward.
            unit.exposed_in_backward = True
            if unit.forward_calls > 1:
                unit.defer = True
        # One more user of the unit's full parameters while this forward
        # runs (the unit's module, or a module holding an alias of one of
        # its parameters, called inside or around the other): the last one
        # to finish reshards.
        unit.users += 1
        unit.unshard()
        if unit not in self.recording:
            self.recording.append(unit)
        if self.forward_prefetch:  # the unit the last forward ran next
            following = self._neighbour(unit, +1)
            if following is not None:
                following.start_gather()
        unit.expose(self._gradients_complete)
        self._mark(unit, "forward_start")

    def _neighbour(self, unit: "Unit", step: int) -> Optional["Unit"]:
        """The unit `step` places after `unit` in the last forward's order."""
        if unit not in self.order:
            return None
        i = self.order.index(unit) + step
        return self.order[i] if 0 <= i < len(self.order) else None

    def _gradients_complete(self, unit: "Unit") -> None:
        """Backward computed every gradient of `unit`."""
        self._mark(unit, "backward_end")
        if self.backward_prefetch == BackwardPrefetch.BACKWARD_POST:
            # torch's BACKWARD_POST: the next unit's gather is issued after
            # this unit's gradients, before its reduction.
            previous = self._neighbour(unit, -1)
            if previous is not None and not previous.reduced:
                previous.start_gather()
        self._reduce_now(unit)

    def _reduce_now(self, unit: "Unit") -> None:
        """Every gradient of `unit` arrived: start reducing it, overlapping
        the rest of backward (each rank's backward reaches the units in the
        same order). One reduction is in flight at a time, so only one
        unit's full gradients wait in the library."""
        self._finish_in_flight()
        unit.start_reduce(self.require_sync, self.free_after_backward)
        self.in_flight = unit

    def _finish_in_flight(self) -> None:
        if self.in_flight is not None:
            unit, self.in_flight = self.in_flight, None
            unit.finish_reduce()

    def _post_forward(self, unit: "Unit", output):
        self._mark(unit, "forward_end")
        unit.users = max(unit.users - 1, 0)
        # Not while an enclosing forward still uses the full parameters
        # (nested users: an alias module around or inside the unit's own),
        # nor in a forward rerun during the unit's backward (non-reentrant
        # activation checkpointing recomputes it from saved-tensor hooks, and
        # backward then reads what it saved: torch's FSDP keeps a unit in
        # its pre-backward state gathered too).
        if unit.reshard_after_forward and unit.users == 0 and not unit.in_backward:
            unit.reshard()
        if torch.is_grad_enabled():
            for t in _tensors_in(output):
                if t.requires_grad:
                    t.register_hook(lambda grad, unit=unit: self._pre_backward(unit))
        return output

    def _pre_backward(self, unit: "Unit") -> None:
        if unit.reduced:
            # Every gradient of the unit is in and its reduction started: a
            # hook on an output whose gradient completes later (a tensor the
            # unit passes through, e.g. an input it returns, or T5's
            # position_bias) has nothing left to compute with the unit's
            # parameters. (Gathered again, they and a full gradient buffer
            # stayed held past backward, and the next forward computed with
            # the values before the optimizer's step.)
            return
        if not self.backward_queued:  # the forward that led here set the order
            self.order, self.recording = self.recording, []
        unit.unshard()
        unit.in_backward = True  # until it is reduced
        # The previous unit's reduction overlapped the gather above; finish
        # it before this unit's full gradients are allocated, so the
        # library never holds two units' full gradients.
        self._finish_in_flight()
        unit.attach_grads()
        if self.backward_prefetch == BackwardPrefetch.BACKWARD_PRE:
            # Backward reaches the units in reverse forward order: gather the
            # next one while this one computes its gradients.
            previous = self._neighbour(unit, -1)
            if previous is not None:
                previous.start_gather()
        if not self.backward_queued:
            self.backward_queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self._finish_backward)
        self._mark(unit, "backward_start")

    def _finish_backward(self) -> None:
        # Units backward did not reach here: reduced now, in one order on
        # every rank (their gradient counts as zero).
        for unit in reversed(self.units):
            if not getattr(unit, "reduced", False):
                self._reduce_now(unit)
        self._finish_in_flight()
        for unit in reversed(self.units):
            unit.reduced = False
            unit.pending = 0  # the next forward exposes fresh leaves
            unit.defer = False
            unit.fired = [0] * len(unit.fired)
            unit.exposed_in_backward = False
            unit.forward_calls = 0
            unit.users = 0  # a forward that raised left its users counted
            unit.in_backward = False
            self._drop_prefetch(unit)  # prefetched but not used: it holds old values
        self.backward_queued = False

    @contextlib.contextmanager
    def no_sync(self):
        previous = self.require_sync
        self.require_sync = False
        try:
            yield
        finally:
            self.require_sync = previous


def _tensors_in(x) -> List[torch.Tensor]:
    """The tensors in a forward's output (nested in dicts, lists and tuples)."""
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, dict):
        return [t for v in x.values() for t in _tensors_in(v)]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _tensors_in(v)]
    return []
