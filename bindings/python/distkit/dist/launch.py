"""Joining and leaving the job: init_dist, as mmengine's, from the
launcher's environment (torchrun, Slurm, MPI), with torch.distributed's
default group on the "distkit" backend; and destroy.

The launcher's variables are read by the library only (dk_launcher_infer,
dk_launcher_info: the parsing dk_init joins with), so Python sees the job as
every other language does. What stays here is mmengine's Python surface:
init_dist's launcher names and messages, its set_device before joining, and
os.environ, a copy Python takes at start-up, refreshed after dk_init exports
torchrun's variables."""
import ctypes
import datetime
import os
from typing import NamedTuple, Optional

from .. import _lib, errors
from .._lib import lib, raise_for_status
from .._millis import to_millis
from . import groups

_TORCH_GROUP_OURS = False  # init_dist made torch.distributed's default group


def infer_launcher() -> str:
    """mmengine's infer_launcher: 'pytorch' (WORLD_SIZE set), 'slurm'
    (SLURM_NTASKS), 'mpi' (OMPI_COMM_WORLD_LOCAL_RANK) or 'none'."""
    return lib.dk_launcher_infer().decode()


class LauncherInfo(NamedTuple):
    """This process's place in the job as the launcher describes it
    (dk_launcher_info_t): what init_dist joins with."""
    launcher: str
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    master_addr: str
    master_port: int
    store_address: str
    hosts_store: bool


def launcher_info(launcher: Optional[str] = None) -> LauncherInfo:
    """Reads ``launcher``'s variables ('pytorch', 'slurm', 'mpi', 'distrun',
    'none'; None: infer_launcher's) as init_dist does. A missing or malformed
    variable raises InvalidArgumentError (a ValueError) naming it."""
    out = ctypes.POINTER(_lib.LauncherInfo)()
    raise_for_status(lib.dk_launcher_info,
                     None if launcher is None else _lib.c_string("launcher", launcher),
                     ctypes.byref(out))
    try:
        c = out.contents
        return LauncherInfo(c.launcher.decode(), c.rank, c.world_size, c.local_rank,
                            c.local_world_size, c.node_rank, c.master_addr.decode(),
                            c.master_port, c.store_address.decode(), bool(c.hosts_store))
    finally:
        lib.dk_free(ctypes.cast(out, ctypes.c_void_p))


def init_dist(launcher, backend="nccl", init_backend="torch", **kwargs) -> None:
    """Joins the job. ``timeout`` (seconds) becomes the per-collective timeout;
    ``connect_timeout`` (seconds or a ``datetime.timedelta``, distkit's own)
    bounds how long joining waits for the job's ranks, ``timeout`` when not
    given."""
    connect_timeout = kwargs.pop("connect_timeout", None)
    if isinstance(connect_timeout, datetime.timedelta):
        connect_timeout = connect_timeout.total_seconds()
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
    # mmengine's init_dist takes these three names only (dk_init also takes
    # "distrun", which distrun's ranks reach as "pytorch"), and checks them
    # before anything else, as here.
    if launcher not in ("pytorch", "mpi", "slurm"):
        raise ValueError(f"Invalid launcher type: {launcher}")
    if init_backend not in ("torch", "deepspeed", "colossalai"):
        raise ValueError(
            f'supported "init_backend" is "torch", "deepspeed" or "colossalai", but got {init_backend}')
    if init_backend != "torch":
        _init_with_package(init_backend, launcher, backend, kwargs)
    config = _lib.InitConfig()
    lib.dk_init_config_init(ctypes.byref(config))
    config.backend = _lib.c_string("backend", backend)
    if kwargs.get("timeout") is not None:
        config.timeout_ms = to_millis(kwargs["timeout"])
    if connect_timeout is not None and float(connect_timeout) > 0:  # else: timeout's
        config.connect_timeout_ms = to_millis(float(connect_timeout))
    if launcher == "slurm" and kwargs.get("port") is not None:
        os.environ["MASTER_PORT"] = str(kwargs["port"])
    _select_cuda_device(launcher)
    world = ctypes.c_void_p()
    try:
        raise_for_status(lib.dk_init, _lib.c_string("launcher", launcher), ctypes.byref(config),
                         ctypes.byref(world))
    except errors.InvalidArgumentError as e:
        # mmengine's mpi launcher reads os.environ['MASTER_ADDR'] and
        # raises KeyError; code may catch exactly that.
        if launcher == "mpi" and "MASTER_ADDR is not set" in str(e):
            raise KeyError("The environment variable MASTER_ADDR is not set") from e
        raise
    if launcher in ("slurm", "mpi"):
        _mirror_exported_variables()
    global _TORCH_GROUP_OURS
    groups._adopt_world(world)
    groups._local_group_from_launcher()
    # As mmengine's init_dist initializes torch.distributed: its default
    # group on the "distkit" backend, over these ranks and connections.
    try:
        from .. import torch_backend
    except ImportError:  # a torch built without torch.distributed
        return
    _TORCH_GROUP_OURS = torch_backend.init_default_group(config.timeout_ms)
    if _TORCH_GROUP_OURS:
        # After a shrink or grow of the default group, torch's follows.
        timeout_ms = config.timeout_ms
        groups._torch_rebase = lambda: torch_backend.rebase_default_group(timeout_ms)


def _select_cuda_device(launcher: str) -> None:
    """mmengine's init_dist: cuda.set_device(local_rank) before joining, so
    that torch's current device is the one the NCCL backend binds
    (cuda:<local_rank % device_count>), the local rank as the library reads
    it. Nothing without a GPU, or when the launcher's variables are wrong
    (dk_init then raises the error naming them)."""
    import torch
    if not torch.cuda.is_available():
        return
    count = torch.cuda.device_count()
    if count == 0:
        return
    try:
        local_rank = launcher_info(launcher).local_rank
    except errors.DistkitError:
        return
    torch.cuda.set_device(local_rank % count)


def _mirror_exported_variables() -> None:
    """dk_init exported torchrun's variables under Slurm and MPI (as
    mmengine's init_dist does) into the C environment; os.environ is a copy
    taken at start-up, so they are copied in for Python code that reads them."""
    libc = ctypes.CDLL(None)
    libc.getenv.restype = ctypes.c_char_p
    libc.getenv.argtypes = [ctypes.c_char_p]
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                 "MASTER_PORT"):
        value = libc.getenv(name.encode())
        if value is not None:
            os.environ[name] = value.decode()


def _init_with_package(init_backend: str, launcher: str, backend: str, kwargs: dict) -> None:
    """mmengine's init_backend='deepspeed' / 'colossalai' (pytorch launcher):
    the package initializes torch.distributed; distkit then joins as usual."""
    import importlib
    try:
        package = importlib.import_module(init_backend)
    except ImportError as e:
        raise ImportError(f"init_dist(init_backend={init_backend!r}) needs the {init_backend!r} "
                          f"package, which cannot be imported here ({e}); install it or use "
                          f"init_backend='torch'", name=init_backend) from e
    if launcher != "pytorch":
        raise ValueError(f"init_backend={init_backend!r} works with the pytorch launcher, "
                         f"as in mmengine; got {launcher!r}")
    if init_backend == "deepspeed":
        package.init_distributed(dist_backend=backend, **kwargs)
    else:
        package.launch_from_torch(backend=backend, **kwargs)

def destroy() -> None:
    """Leaves the job (local). Not in mmengine; mirrors destroy_process_group."""
    global _TORCH_GROUP_OURS
    if _TORCH_GROUP_OURS:
        import torch.distributed as tdist
        if tdist.is_initialized():
            tdist.destroy_process_group()
        _TORCH_GROUP_OURS = False
    groups._torch_rebase = None
    import sys
    torch_backend = sys.modules.get("distkit.torch_backend")
    if torch_backend is not None:
        # The distkit groups of torch's process groups that are gone (the
        # default one just destroyed holds the world) go before the
        # library shuts down, not at the next group's making.
        torch_backend._release_unused_groups()
    groups._leave_job()
