"""The job and its process groups: joining and leaving, the default and the
node-local group, new groups, and each rank's place in them."""
import ctypes
import datetime
import functools
import os
from typing import Optional

from .. import _lib
from .._lib import check, lib


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

    def abort(self) -> None:
        """Cancels in-flight work; every later call on this group fails."""
        lib.dk_group_abort(self._handle)

    def __repr__(self) -> str:
        return f"ProcessGroup(name={self.name()!r}, rank={self.rank()}, size={self.size()})"

    def __del__(self):
        if getattr(self, "_handle", None):
            lib.dk_group_destroy(self._handle)
            self._handle = None


_default_group: Optional[ProcessGroup] = None
_LOCAL_PROCESS_GROUP: Optional[ProcessGroup] = None


def handle_of(group: Optional[ProcessGroup]):
    """The dk_group_t* to pass for ``group`` (NULL: the default group)."""
    return group._handle if group is not None else None


# ---- environment and topology -------------------------------------------------


def is_distributed() -> bool:
    return lib.dk_is_distributed() == 1


def get_default_group() -> Optional[ProcessGroup]:
    return _default_group if is_distributed() else None


def get_backend(group: Optional[ProcessGroup] = None) -> Optional[str]:
    if not is_distributed():
        return None
    return (group or _default_group).backend()


def get_world_size(group: Optional[ProcessGroup] = None) -> int:
    if not is_distributed():
        return 1
    return (group or _default_group).size()


def get_rank(group: Optional[ProcessGroup] = None) -> int:
    if not is_distributed():
        return 0
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


def barrier(group: Optional[ProcessGroup] = None) -> None:
    if is_distributed():
        check(lib.dk_group_barrier, handle_of(group), None)


# ---- joining and leaving --------------------------------------------------------


def infer_launcher() -> str:
    if "WORLD_SIZE" in os.environ:
        return "pytorch"
    if "SLURM_NTASKS" in os.environ:
        return "slurm"
    if "OMPI_COMM_WORLD_LOCAL_RANK" in os.environ:
        return "mpi"
    return "none"


def init_dist(launcher, backend="nccl", init_backend="torch", **kwargs) -> None:
    """Joins the job. ``timeout`` (seconds) becomes the per-collective timeout."""
    timeout = kwargs.get("timeout", None)
    if timeout is not None:
        try:
            kwargs["timeout"] = datetime.timedelta(seconds=timeout)
        except TypeError as exception:
            raise TypeError(
                f"Timeout for distributed training must be provided as timeout in seconds, "
                f"but we've received the type {type(timeout)}. Please specify the timeout "
                f"like this: dist_cfg=dict(backend='nccl', timeout=1800)") from exception
    import torch.multiprocessing as mp

    if mp.get_start_method(allow_none=True) is None:
        mp.set_start_method("spawn")
    if launcher not in ("pytorch", "mpi", "slurm"):
        raise ValueError(f"Invalid launcher type: {launcher}")
    if init_backend not in ("torch", "deepspeed", "colossalai"):
        raise ValueError(
            f'supported "init_backend" is "torch", "deepspeed" or "colossalai", but got {init_backend}')
    config = _lib.InitConfig()
    lib.dk_init_config_init(ctypes.byref(config))
    config.backend = backend.encode()
    if kwargs.get("timeout") is not None:
        config.timeout_ms = int(kwargs["timeout"].total_seconds() * 1000)
    if launcher == "slurm" and kwargs.get("port") is not None:
        os.environ["MASTER_PORT"] = str(kwargs["port"])
    world = ctypes.c_void_p()
    check(lib.dk_init, launcher.encode(), ctypes.byref(config), ctypes.byref(world))
    global _default_group
    _default_group = ProcessGroup(world)


def destroy() -> None:
    """Leaves the job (local). Not in mmengine; mirrors destroy_process_group."""
    global _default_group, _LOCAL_PROCESS_GROUP
    _LOCAL_PROCESS_GROUP = None
    _default_group = None
    lib.dk_shutdown()


def new_group(ranks, group: Optional[ProcessGroup] = None) -> ProcessGroup:
    """Collective over ``group`` (default: the world): a group of ``ranks``."""
    array = (ctypes.c_int32 * len(ranks))(*ranks)
    out = ctypes.c_void_p()
    check(lib.dk_group_new, handle_of(group), array, len(ranks), ctypes.byref(out))
    return ProcessGroup(out)


# ---- the node-local group --------------------------------------------------------


def init_local_group(node_rank: int, num_gpus_per_node: int) -> None:
    global _LOCAL_PROCESS_GROUP
    assert _LOCAL_PROCESS_GROUP is None
    check(lib.dk_init_local_group, node_rank, num_gpus_per_node)
    out = ctypes.c_void_p()
    check(lib.dk_local_group, ctypes.byref(out))
    _LOCAL_PROCESS_GROUP = ProcessGroup(out)


_NO_LOCAL_GROUP = ("Local process group is not created, please use `init_local_group` to setup "
                   "local process group.")


def get_local_group() -> Optional[ProcessGroup]:
    if not is_distributed():
        return None
    if _LOCAL_PROCESS_GROUP is None:
        raise RuntimeError(_NO_LOCAL_GROUP)
    return _LOCAL_PROCESS_GROUP


def get_local_size() -> int:
    if not is_distributed():
        return 1
    if _LOCAL_PROCESS_GROUP is None:
        raise RuntimeError(_NO_LOCAL_GROUP)
    return _LOCAL_PROCESS_GROUP.size()


def get_local_rank() -> int:
    if not is_distributed():
        return 0
    if _LOCAL_PROCESS_GROUP is None:
        raise RuntimeError(_NO_LOCAL_GROUP)
    return _LOCAL_PROCESS_GROUP.rank()
