"""Groups torch.distributed knows. Once torch.distributed is initialized (by
user code, by init_dist, or on the "distkit" backend), the groups
distkit.dist hands out are torch's own, made as mmengine makes them
(``torch.distributed.new_group``, called by every rank of the world for
each group), so ``torch.distributed.get_rank(group)``, ``broadcast(...,
group=group)`` and the rest accept them. distkit's collectives on such a
group run on its twin, the distkit group over the same ranks in the same
order (torch's: ascending global ranks).

Where torch's default group is on distkit's backend, torch's new group
adopts the twin itself (the backend's creator is handed it; nothing is
created twice), and the store barrier torch ends new_group with is
answered at once in distkit's job store: the twin was made by a
collective over the world (dk_group_new), which ranks in other languages
join too. Elsewhere (torch's Gloo or NCCL) torch makes its own group
beside the twin.

This module keeps the table torch group -> twin; groups.py makes the
groups. It never imports torch itself: torch is in use only where user
code or distkit imported torch.distributed already."""
import sys
import threading
from typing import Any, List, Optional

_twins: dict = {}  # torch group -> distkit ProcessGroup (None: distkit's default group)
_adoption = threading.local()  # .making, .group: see making() and adopted()
NOT_FOUND = object()  # twin()'s answer for a group torch made without distkit


def _tdist():
    return sys.modules.get("torch.distributed")


def active() -> bool:
    """torch.distributed is initialized: groups handed out are torch's."""
    tdist = _tdist()
    return bool(tdist is not None and tdist.is_available() and tdist.is_initialized())


def on_distkit_backend() -> bool:
    """torch's default group is on the "distkit" backend."""
    return active() and str(_tdist().get_backend()) == "distkit"


def default_group():
    """torch's default group (torch.distributed must be initialized)."""
    return _tdist().distributed_c10d._get_default_group()


def is_torch_group(obj: Any) -> bool:
    """A torch ProcessGroup, or torch's NON_GROUP_MEMBER (what new_group
    gives the ranks outside the group)."""
    tdist = _tdist()
    if tdist is None or not tdist.is_available():
        return False
    return isinstance(obj, tdist.ProcessGroup) or obj is tdist.GroupMember.NON_GROUP_MEMBER


def is_non_member(obj: Any) -> bool:
    tdist = _tdist()
    return tdist is not None and tdist.is_available() and \
        obj is tdist.GroupMember.NON_GROUP_MEMBER


def twin(group) -> Any:
    """The distkit group torch group ``group`` runs on (None: distkit's
    default group), or ``NOT_FOUND`` for a group torch made without
    distkit (torch.distributed.new_group called directly, not on distkit's
    backend)."""
    found = _twins.get(group, NOT_FOUND)
    if found is not NOT_FOUND:
        return found
    if active() and group is default_group():
        return None
    found = getattr(group, "_dk_group", NOT_FOUND)  # made on the "distkit" backend
    if found is NOT_FOUND and hasattr(group, "_get_backend"):
        # torch 2.x: torch's group wraps the backend that keeps the twin.
        import torch
        try:
            found = getattr(group._get_backend(torch.device("cpu")), "_dk_group", NOT_FOUND)
        except RuntimeError:  # no CPU backend in that group
            pass
    return found



def global_ranks(group) -> List[int]:
    """torch's default-group rank of each member of torch group ``group``,
    in group order."""
    if group is default_group():
        return list(range(_tdist().get_world_size()))
    mapping = _tdist().distributed_c10d._pg_group_ranks[group]
    return [g for g, _ in sorted(mapping.items(), key=lambda item: item[1])]


def make(ranks: List[int], group, timeout=None) -> Any:
    """``torch.distributed.new_group(ranks, timeout=timeout)``, called on
    every rank of torch's world, for twin ``group`` (this rank's distkit group
    over ``ranks`` in ascending order; None where this rank is not a member).
    Returns torch's group (NON_GROUP_MEMBER outside it)."""
    tdist = _tdist()
    _adoption.making = on_distkit_backend()
    _adoption.group = group
    try:
        made = tdist.new_group(ranks) if timeout is None else tdist.new_group(
            ranks, timeout=timeout)
    finally:
        _adoption.making, _adoption.group = False, None
    if made is not tdist.GroupMember.NON_GROUP_MEMBER:
        remember(made, group)
    return made


def remember(torch_group, group) -> None:
    _twins[torch_group] = group


def making() -> bool:
    """Inside make, on distkit's backend: the store barrier that ends
    torch's new_group is answered at once."""
    return getattr(_adoption, "making", False)


def adopted() -> Optional[Any]:
    """The twin the "distkit" backend's creator adopts (inside make; None
    otherwise: the creator makes a group of the members)."""
    return getattr(_adoption, "group", None) if making() else None


def forget() -> None:
    """Leaving the job: the table is emptied."""
    _twins.clear()
