"""The job's process groups: the default and the node-local group, new
groups, and each rank's place in them (joining and leaving: launch.py).

Once torch.distributed is initialized, the groups handed out here are
torch's own, each with a distkit twin that distkit's collectives run on
(torch_groups.py); every function that takes a group takes either kind."""
import ctypes
import datetime
import functools
from typing import Optional

from .. import errors
from .._lib import GroupOptions, lib, raise_for_status
from .._millis import to_millis
from . import torch_groups, torch_join
from .call_forms import Form, choose
from .work import Work, start


class ProcessGroup:
    """A group of ranks (the handle of a dk_group_t)."""

    def __init__(self, handle):
        self._handle = ctypes.c_void_p(handle) if not isinstance(handle, ctypes.c_void_p) else handle

    def rank(self) -> int:
        return lib.dk_group_rank(self._handle)

    def size(self) -> int:
        return lib.dk_group_size(self._handle)

    def name(self) -> str:
        return lib.dk_group_name(self._handle).decode()

    def backend(self) -> str:
        return lib.dk_group_backend(self._handle).decode()

    def global_ranks(self) -> list:
        """The default group's rank of each member, in group order."""
        if getattr(self, "_global_ranks", None) is None:
            self._global_ranks = [lib.dk_group_global_rank(self._handle, r)
                                  for r in range(max(self.size(), 0))]
        return self._global_ranks

    def abort(self) -> None:
        """Cancels in-flight work; every later call on this group fails."""
        lib.dk_group_abort(self._handle)

    def __repr__(self) -> str:
        return f"ProcessGroup(name={self.name()!r}, rank={self.rank()}, size={self.size()})"

    # The function is bound here: a group that lives until the interpreter
    # shuts down is destroyed after this module's globals are cleared.
    def __del__(self, _destroy=lib.dk_group_destroy):
        if getattr(self, "_handle", None):
            _destroy(self._handle)
            self._handle = None


_default_group: Optional[ProcessGroup] = None
_LOCAL_PROCESS_GROUP: Optional[ProcessGroup] = None
_LOCAL_FROM_LAUNCHER = False  # init_dist made _LOCAL_PROCESS_GROUP
_LOCAL_TORCH_GROUP = None  # torch's group over _LOCAL_PROCESS_GROUP's ranks
_DEFAULT_SHRUNK = False  # shrink_group replaced the default group torch knows
# Set by init_dist where it made torch's default group: makes it again over
# the default group after a shrink or grow (torch_backend.rebase_default_group).
_torch_rebase = None


def is_group(obj) -> bool:
    """A group this API takes: distkit's or torch's."""
    return isinstance(obj, ProcessGroup) or torch_groups.is_torch_group(obj)


def _twin(group) -> Optional[ProcessGroup]:
    """The distkit group ``group`` runs on (None: the default group)."""
    if group is None or isinstance(group, ProcessGroup):
        return group
    check_member(group)
    found = torch_groups.twin(group)
    if found is torch_groups.NOT_FOUND:
        found = _twin_for_torch_group(group)
    return found


def check_member(group) -> None:
    """A FailedPreconditionError where ``group`` is torch's NON_GROUP_MEMBER
    (a collective on a group this rank is not in)."""
    if torch_groups.is_non_member(group):
        raise errors.FailedPreconditionError(
            errors.FAILED_PRECONDITION,
            "this rank is not a member of the group (torch's NON_GROUP_MEMBER, what new_group "
            "returns outside the group)")


def _twin_for_torch_group(group) -> ProcessGroup:
    """A twin for a group torch made without distkit (new_group called
    directly): collective over its members, at their first distkit call on
    it, named after torch's name for it (the same on every member)."""
    if not joined():
        if torch_groups.global_ranks(group) != list(range(torch_join.torch_rank_and_size()[1])):
            raise RuntimeError(
                "distkit has not joined torch.distributed's job yet, and this group made by "
                "torch.distributed.new_group leaves ranks out; call a distkit collective on the "
                "default group (e.g. distkit.dist.barrier()) on every rank first, or make the "
                "group with distkit.dist.new_group")
        _join_torch_job()
    ranks = torch_groups.global_ranks(group)
    import torch.distributed as tdist
    name = "torch-" + tdist.distributed_c10d._pg_names[group]
    array = (ctypes.c_int32 * len(ranks))(*ranks)
    out = ctypes.c_void_p()
    raise_for_status(lib.dk_group_new_named, None, array, len(ranks), name.encode(),
                     ctypes.byref(out))
    made = ProcessGroup(out)
    torch_groups.remember(group, made)
    return made


def joined() -> bool:
    """distkit has its default group (init_dist, or torch's job joined)."""
    return _default_group is not None or lib.dk_is_distributed() == 1


def handle_of(group):
    """The dk_group_t* to pass for ``group`` (NULL: the default group). The
    default group of a job torch.distributed was initialized for by user
    code is joined here, at the first call that needs it (collective)."""
    group = _twin(group)
    if group is not None:
        return group._handle
    _join_torch_job()
    return None


def library_default_group() -> Optional[ProcessGroup]:
    """distkit's own default group, never torch's (joined first where user
    code initialized torch.distributed): groups made over it stay
    distkit's, unseen by torch."""
    _join_torch_job()
    return _default_group


def _join_torch_job() -> None:
    global _default_group
    if _default_group is not None or lib.dk_is_distributed() == 1:
        return  # joined (the first test keeps every collective's path short)
    world = torch_join.join()
    if world is not None:
        _default_group = ProcessGroup(world)


def _adopt_world(world) -> None:
    """distkit's world, joined by init_dist or for torch.distributed's
    "distkit" backend."""
    global _default_group
    _default_group = ProcessGroup(world)


def _torch_only() -> bool:
    """torch.distributed is initialized and distkit has not joined it yet:
    local queries answer from torch, as mmengine's do."""
    return (_default_group is None and lib.dk_is_distributed() != 1
            and torch_join.torch_default_group_initialized())


# ---- environment and topology -------------------------------------------------


def is_distributed() -> bool:
    """distkit joined a job (init_dist), or user code initialized
    torch.distributed (then distkit joins it when first needed)."""
    return lib.dk_is_distributed() == 1 or torch_join.torch_default_group_initialized()


def get_default_group():
    """The world: torch's default group once torch.distributed is
    initialized (local, as mmengine's), else distkit's."""
    if not is_distributed():
        return None
    if torch_groups.active() and not _DEFAULT_SHRUNK:
        return torch_groups.default_group()
    _join_torch_job()
    return _default_group


def get_backend(group=None) -> Optional[str]:
    """The backend of ``group`` (None: the default group), as mmengine's
    ``get_backend`` answers: once torch.distributed is initialized, torch's
    answer for the groups it knows (the default group, and every group
    distkit.dist hands out then), so ``"distkit"`` on torch's "distkit"
    backend; otherwise, and for distkit's own groups (a subgroup of a
    subgroup, a shrunk world), the transport the library runs the group on
    ("gloo", "nccl", ...). ``transport(group)`` always gives the latter."""
    if not is_distributed():
        return None
    if torch_groups.active() and (
            (group is None and not _DEFAULT_SHRUNK) or torch_groups.is_torch_group(group)):
        import torch.distributed as tdist
        return str(tdist.get_backend(group))
    return transport(group)


def transport(group=None) -> Optional[str]:
    """The library's backend for ``group`` ("gloo", "nccl", "shm", ...; for a
    group on torch's "distkit" backend, the one its distkit twin runs on):
    what decides where data travels (get_comm_device's rule)."""
    if not is_distributed():
        return None
    if group is None and _torch_only():
        return torch_join.torch_backend()
    if group is not None and torch_groups.is_torch_group(group):
        found = torch_groups.twin(group)
        if found is torch_groups.NOT_FOUND or (found is None and _default_group is None):
            import torch.distributed as tdist
            return str(tdist.get_backend(group))
        group = found
    return (group or _default_group).backend()


def get_world_size(group=None) -> int:
    if not is_distributed():
        return 1
    if group is None and _torch_only():
        return torch_join.torch_rank_and_size()[1]
    if group is not None and torch_groups.is_torch_group(group):  # torch answers, as in mmengine
        import torch.distributed as tdist
        return tdist.get_world_size(group)
    return (group or _default_group).size()


def get_rank(group=None) -> int:
    if not is_distributed():
        return 0
    if group is None and _torch_only():
        return torch_join.torch_rank_and_size()[0]
    if group is not None and torch_groups.is_torch_group(group):
        import torch.distributed as tdist
        return tdist.get_rank(group)
    return (group or _default_group).rank()


def get_dist_info(group: Optional[ProcessGroup] = None):
    return get_rank(group), get_world_size(group)


def is_main_process(group: Optional[ProcessGroup] = None) -> bool:
    return get_rank(group) == 0


def master_only(func):
    """Runs ``func`` on the main process only; other ranks get None."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        if is_main_process():
            return func(*args, **kwargs)

    return wrapper


def barrier(group: Optional[ProcessGroup] = None, async_op: bool = False):
    """No-op when not distributed. async_op: returns a Work."""
    if not is_distributed():
        return Work(None) if async_op else None
    if async_op:
        return Work(start(lib.dk_group_barrier, handle_of(group)))
    raise_for_status(lib.dk_group_barrier, handle_of(group), None)
    return None


# ---- global ranks (torch's convention for src / dst) ----------------------------


def _global_ranks(group) -> list:
    """The default group's rank of each member of ``group``, in group order."""
    if not torch_groups.is_torch_group(group):
        return group.global_ranks()
    if torch_groups.is_non_member(group):
        return []
    return torch_groups.global_ranks(group)


def get_global_rank(group, group_rank: int) -> int:
    """The default group's rank of ``group``'s rank ``group_rank``."""
    if group is None or not is_distributed():
        return group_rank
    ranks = _global_ranks(group)
    if not 0 <= group_rank < len(ranks):
        raise ValueError(f"Group rank {group_rank} is not part of group {group}")
    return ranks[group_rank]


def get_group_rank(group, global_rank: int) -> int:
    """``group``'s rank of default-group rank ``global_rank`` (src / dst in
    this API are global ranks, as in torch.distributed and mmengine; the C
    ABI takes group ranks). ValueError when it is not a member."""
    if not isinstance(global_rank, int) or isinstance(global_rank, bool):
        raise TypeError(f"a rank must be an int, got {global_rank!r}")
    if group is None or not is_distributed():
        if is_distributed() and not 0 <= global_rank < get_world_size():
            raise ValueError(f"Global rank {global_rank} is not part of the default group "
                             f"of size {get_world_size()}")
        return global_rank
    try:
        return _global_ranks(group).index(global_rank)
    except ValueError:
        raise ValueError(f"Global rank {global_rank} is not part of group {group}") from None


# ---- set by joining and leaving (launch.py) -------------------------------------


def _local_group_from_launcher() -> None:
    """The node-local group dk_init made from the launcher's layout (on every
    rank, whatever its language), so get_local_rank() works right after
    init_dist; where the layout gives none it raises until init_local_group."""
    global _LOCAL_PROCESS_GROUP, _LOCAL_FROM_LAUNCHER
    out = ctypes.c_void_p()
    try:
        raise_for_status(lib.dk_local_group, ctypes.byref(out))
    except errors.FailedPreconditionError:
        return
    _LOCAL_PROCESS_GROUP = ProcessGroup(out)
    _LOCAL_FROM_LAUNCHER = True


def _leave_job() -> None:
    """destroy()'s part here: the job's groups forgotten, the library shut down."""
    global _default_group, _LOCAL_PROCESS_GROUP, _LOCAL_FROM_LAUNCHER, _LOCAL_TORCH_GROUP
    global _DEFAULT_SHRUNK
    _LOCAL_PROCESS_GROUP = _LOCAL_TORCH_GROUP = None
    _LOCAL_FROM_LAUNCHER = _DEFAULT_SHRUNK = False
    _default_group = None
    torch_groups.forget()
    lib.dk_shutdown()
    torch_join.release()


# ---- new groups -----------------------------------------------------------------


def new_group(ranks, group=None, timeout=None):
    """Collective over ``group`` (default: the world): a group of ``ranks``.
    Once torch.distributed is initialized (and ``group`` is the world),
    torch's group over ``ranks`` (torch.distributed.new_group on every rank;
    group ranks in ascending global-rank order, as torch numbers them;
    NON_GROUP_MEMBER outside it), with its distkit twin; otherwise
    distkit's group, ranks in the order given. ``timeout`` (seconds or a
    ``datetime.timedelta``, as torch's new_group takes it) bounds the new
    group's operations and its creation; None: the parent's."""
    to_torch = torch_groups.active() and not _DEFAULT_SHRUNK and (
        group is None or (torch_groups.is_torch_group(group) and _twin(group) is None))
    members = sorted(ranks) if to_torch else list(ranks)
    array = (ctypes.c_int32 * len(members))(*members)
    options = GroupOptions()
    lib.dk_group_options_init(ctypes.byref(options))
    if timeout is not None:
        seconds = timeout.total_seconds() if hasattr(timeout, "total_seconds") else timeout
        if seconds <= 0:
            raise ValueError(f"new_group: timeout must be positive, got {timeout!r}")
        options.timeout_ms = to_millis(seconds)
    out = ctypes.c_void_p()
    raise_for_status(lib.dk_group_new_with_options, handle_of(group), array, len(members),
                     ctypes.byref(options), ctypes.byref(out))
    made = ProcessGroup(out)
    if not to_torch:
        return made
    return torch_groups.make(members, made if made.rank() >= 0 else None,
                             timeout=None if timeout is None else datetime.timedelta(
                                 seconds=options.timeout_ms / 1000))


def shrink_group(group: Optional[ProcessGroup] = None, settle: float = 5.0) -> ProcessGroup:
    """Recovery without restarting: every survivor of a failure calls it on
    the failed ``group`` (default: the default group, which the result then
    replaces). Returns a group of the survivors, ranks renumbered in the old
    order, to go on at the smaller size. ``settle``: seconds to wait for
    every member to report alive. Raises when this rank reported after the
    others agreed. Where init_dist made torch.distributed's default group,
    it is made again over the survivors (so is it after grow_group)."""
    out = ctypes.c_void_p()
    raise_for_status(lib.dk_group_shrink, handle_of(group), to_millis(settle), ctypes.byref(out))
    return _replacing(group, ProcessGroup(out))


def grow_group(group: Optional[ProcessGroup] = None, world_size: Optional[int] = None,
               timeout: Optional[float] = None) -> ProcessGroup:
    """Back to the job's size once a new process takes a lost rank's place
    (``distrun --max-replacements K`` starts it with DISTKIT_REPLACEMENT=<n>):
    every survivor calls it on the group it holds (``group``: the one
    shrink_group returned, or the failed group itself; default: the default
    group, which the result then replaces). That group is aborted first. The
    replacement does not call it: its init_dist joins this grow and its
    world is the grown group. Returns a group of ``world_size`` ranks
    (default: the size the job started with), ranks in the original order,
    named "world@g<generation>"; nothing sent on the old group can reach it.
    ``timeout``: seconds for every member to arrive and connect (None or 0:
    ``group``'s operation timeout); past it, a DeadlineExceededError naming
    the ranks that never came, on every participant. No node-local group
    afterwards, on either side. Gloo groups only."""
    out = ctypes.c_void_p()
    timeout_ms = to_millis(timeout)  # None: -1 and 0: 0, both the group's
    raise_for_status(lib.dk_group_grow, handle_of(group), int(world_size or 0), timeout_ms,
                     ctypes.byref(out))
    return _replacing(group, ProcessGroup(out))


def _replacing(group: Optional[ProcessGroup], new: ProcessGroup) -> ProcessGroup:
    """shrink_group's or grow_group's result ``new``, made the default group
    where ``group`` was not given (it replaced the default group then)."""
    global _default_group, _LOCAL_PROCESS_GROUP, _LOCAL_FROM_LAUNCHER, _LOCAL_TORCH_GROUP
    if group is None:
        _default_group = new  # the library's default group is this one now
        _LOCAL_PROCESS_GROUP = _LOCAL_TORCH_GROUP = None
        _LOCAL_FROM_LAUNCHER = False
        _follow_with_torch()
    return new


def _follow_with_torch() -> None:
    """The default group was replaced (shrink or grow). Where init_dist made
    torch's default group, it is made again over the new one (collective),
    and torch's answers hold again; otherwise torch's default group keeps
    the old ranks and distkit.dist answers for its own default group."""
    global _DEFAULT_SHRUNK
    _DEFAULT_SHRUNK = True  # distkit's own answers while torch's is remade
    if _torch_rebase is not None:
        _torch_rebase()
        _DEFAULT_SHRUNK = False


def grow_pending(group: Optional[ProcessGroup] = None) -> bool:
    """Local: whether a replacement that came after the survivors stopped
    waiting for it (and shrank) waits to join the next grow_group of the
    world ``group`` (default: the default group) belongs to. Ranks may see
    it at different moments: agree (e.g. an all_reduce of max) before all
    call grow_group."""
    pending = ctypes.c_int32()
    raise_for_status(lib.dk_group_grow_pending, handle_of(group), ctypes.byref(pending))
    return bool(pending.value)


# ---- the node-local group --------------------------------------------------------


_LOCAL_GROUP_FORMS = (
    Form("init_local_group(group_size)", lambda group_size: None),
    Form("init_local_group(node_rank, num_gpus_per_node)",
         lambda node_rank, num_gpus_per_node: None))


def init_local_group(*args, **kwargs) -> None:
    """Collective: the node-local group. mmengine's form names this node
    and its size; the seed's form, ``init_local_group(group_size)``, makes
    consecutive groups of ``group_size`` ranks. The group init_dist made
    from the launcher's layout is kept when the ranks are the same and
    replaced otherwise."""
    global _LOCAL_PROCESS_GROUP, _LOCAL_FROM_LAUNCHER
    _join_torch_job()
    one = len(args) + len(kwargs) == 1
    seed, arguments = choose("init_local_group", *_LOCAL_GROUP_FORMS, args, kwargs, one)
    if seed:
        per_node = arguments["group_size"]
        valid = isinstance(per_node, int) and per_node > 0
        node_rank = get_rank() // per_node if valid else 0  # invalid: the library says why
    else:
        node_rank, per_node = arguments["node_rank"], arguments["num_gpus_per_node"]
    assert _LOCAL_PROCESS_GROUP is None or _LOCAL_FROM_LAUNCHER
    raise_for_status(lib.dk_init_local_group, node_rank, per_node)
    out = ctypes.c_void_p()
    raise_for_status(lib.dk_local_group, ctypes.byref(out))
    _LOCAL_PROCESS_GROUP = ProcessGroup(out)
    _LOCAL_FROM_LAUNCHER = False
    local_group_to_torch()


def local_group_to_torch() -> None:
    """Collective: torch's groups for the node-local groups, once
    torch.distributed is initialized (init_local_group, and init_dist after
    it initialized torch.distributed). On distkit's backend each rank makes
    its own node's group, adopting the twin (one new_group call on every
    rank, as mmengine's init_local_group makes it; nothing travels); on
    another backend every rank makes every node's group, in order (torch's
    groups there rendezvous through torch's store, by group)."""
    global _LOCAL_TORCH_GROUP
    _LOCAL_TORCH_GROUP = None
    if _LOCAL_PROCESS_GROUP is None or not torch_groups.active() or _DEFAULT_SHRUNK:
        return
    mine = _LOCAL_PROCESS_GROUP.global_ranks()
    nodes = [mine]
    if not torch_groups.on_distkit_backend():
        import torch.distributed as tdist
        everyone = [None] * tdist.get_world_size()
        tdist.all_gather_object(everyone, mine)
        nodes = sorted({tuple(ranks) for ranks in everyone})
    for ranks in nodes:
        made = torch_groups.make(list(ranks), _LOCAL_PROCESS_GROUP if list(ranks) == mine else None)
        if list(ranks) == mine:
            _LOCAL_TORCH_GROUP = made


_NO_LOCAL_GROUP = ("Local process group is not created, please use `init_local_group` to setup "
                   "local process group.")


def _local_process_group() -> Optional[ProcessGroup]:
    """distkit's node-local group (None when not distributed)."""
    if not is_distributed():
        return None
    if _LOCAL_PROCESS_GROUP is None:
        raise RuntimeError(_NO_LOCAL_GROUP)
    return _LOCAL_PROCESS_GROUP


def get_local_group():
    """The node-local group: torch's once torch.distributed is initialized."""
    local = _local_process_group()
    if local is not None and _LOCAL_TORCH_GROUP is not None and torch_groups.active():
        return _LOCAL_TORCH_GROUP
    return local


def get_local_size() -> int:
    local = _local_process_group()
    return 1 if local is None else local.size()


def get_local_rank() -> int:
    local = _local_process_group()
    return 0 if local is None else local.rank()
