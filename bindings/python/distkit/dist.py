"""mmengine.dist, on distkit: the same names, signatures, return conventions,
exception types and messages (see shared/reference/semantics.md), so code
written against mmengine runs after ``from distkit import dist``.

Tensors are torch tensors or numpy arrays on the CPU; they travel to the C ABI
through DLPack and are updated in place, never copied through Python lists.
Objects travel pickled. Collectives release the GIL while they wait.
"""
import ctypes
import datetime
import functools
import os
import pickle
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from itertools import chain, zip_longest
from typing import Any, List, Optional

import numpy as np
import torch

from . import _lib
from ._dlpack import Borrowed
from ._lib import check, lib, take_items
from .errors import DistkitError

_REDUCE_OPS = {"sum": 0, "product": 1, "min": 2, "max": 3, "band": 4, "bor": 5, "bxor": 6}
_MEAN = 7


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


def _handle(group):
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
        check(lib.dk_group_barrier, _handle(group), None)


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
    check(lib.dk_group_new, _handle(group), array, len(ranks), ctypes.byref(out))
    return ProcessGroup(out)


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


# ---- devices ---------------------------------------------------------------------


def get_comm_device(group: Optional[ProcessGroup] = None) -> torch.device:
    backend = get_backend(group)
    if backend == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _common_device(items) -> torch.device:
    """The one device of every item in ``items`` (mmengine's rules and texts)."""
    pre = None
    for item in items:
        cur = get_data_device(item)
        if pre is None:
            pre = cur
        elif cur != pre:
            raise ValueError(f"device type in data should be consistent, but got {cur} and {pre}")
    if pre is None:
        raise ValueError("data should not be empty.")
    return pre


def get_data_device(data) -> torch.device:
    if isinstance(data, torch.Tensor):
        return data.device
    elif isinstance(data, Mapping):
        return _common_device(data.values())
    elif isinstance(data, Iterable) and not isinstance(data, str):
        return _common_device(data)
    else:
        raise TypeError(f"data should be a Tensor, sequence of tensor or dict, but got {data}")


def cast_data_device(data, device: torch.device, out=None):
    if out is not None:
        if type(data) != type(out):
            raise TypeError(
                f"out should be the same type with data, but got data is {type(data)} and out "
                f"is {type(data)}")
        if isinstance(out, set):
            raise TypeError("out should not be a set")
    if isinstance(data, torch.Tensor):
        if get_data_device(data) == device:
            data_on_device = data
        else:
            data_on_device = data.to(device)
        if out is not None:
            out.copy_(data_on_device)
        return data_on_device
    elif isinstance(data, Mapping):
        data_on_device = {}
        if out is not None:
            data_len = len(data)
            out_len = len(out)
            if data_len != out_len:
                raise ValueError(
                    f"length of data and out should be same, but got {data_len} and {out_len}")
            for k, v in data.items():
                data_on_device[k] = cast_data_device(v, device, out[k])
        else:
            for k, v in data.items():
                data_on_device[k] = cast_data_device(v, device)
        if len(data_on_device) == 0:
            raise ValueError("data should not be empty")
        return type(data)(data_on_device)  # type: ignore
    elif isinstance(data, Iterable) and not isinstance(data, str) and not isinstance(data, np.ndarray):
        data_on_device = []
        if out is not None:
            for v1, v2 in zip(data, out):
                data_on_device.append(cast_data_device(v1, device, v2))
        else:
            for v in data:
                data_on_device.append(cast_data_device(v, device))
        if len(data_on_device) == 0:
            raise ValueError("data should not be empty")
        return type(data)(data_on_device)  # type: ignore
    else:
        raise TypeError(f"data should be a Tensor, list of tensor or dict, but got {data}")


# ---- collectives -------------------------------------------------------------------


def _get_reduce_op(name: str) -> int:
    if name.lower() not in _REDUCE_OPS:
        raise ValueError(f"reduce op should be one of {_REDUCE_OPS.keys()}, bug got {name}")
    return _REDUCE_OPS[name.lower()]


def _is_numpy(data) -> bool:
    return isinstance(data, np.ndarray)


def _on_comm_device(data, group):
    """(tensor on the comm device, input device); numpy arrays stay as they are."""
    if _is_numpy(data):
        return data, None
    input_device = get_data_device(data)
    return cast_data_device(data, get_comm_device(group)), input_device


def _back(data_on_device, data, input_device):
    if input_device is not None:
        cast_data_device(data_on_device, input_device, out=data)


def _on_cpu_comm_device(data, group) -> bool:
    """The common case: a CPU tensor and a CPU backend. The collective then
    works on the caller's tensor itself and nothing is cast back (mmengine's
    final copy would copy the tensor onto itself)."""
    return (isinstance(data, torch.Tensor) and data.device.type == "cpu"
            and get_backend(group) != "nccl")


def all_reduce(data, op: str = "sum", group: Optional[ProcessGroup] = None) -> None:
    world_size = get_world_size(group)
    if world_size > 1:
        code = _MEAN if op.lower() == "mean" else _get_reduce_op(op)
        if _on_cpu_comm_device(data, group):
            view = Borrowed(data)
            check(lib.dk_group_all_reduce, _handle(group), view.pointer, code, None)
            return
        data_on_device, input_device = _on_comm_device(data, group)
        view = Borrowed(data_on_device)
        check(lib.dk_group_all_reduce, _handle(group), view.pointer, code, None)
        _back(data_on_device, data, input_device)


def reduce(data, dst: int = 0, op: str = "sum", group: Optional[ProcessGroup] = None) -> None:
    """Reduces ``data`` from every rank into ``dst``'s, in place (same op names
    as all_reduce). Other ranks' data is left as it was."""
    if get_world_size(group) > 1:
        code = _MEAN if op.lower() == "mean" else _get_reduce_op(op)
        data_on_device, input_device = _on_comm_device(data, group)
        view = Borrowed(data_on_device)
        check(lib.dk_group_reduce, _handle(group), view.pointer, code, dst, None)
        if get_rank(group) == dst:
            _back(data_on_device, data, input_device)


def all_gather(data, group: Optional[ProcessGroup] = None) -> list:
    world_size = get_world_size(group)
    if world_size == 1:
        return [data]
    if _is_numpy(data):
        out = np.empty((world_size,) + data.shape, dtype=data.dtype)
        a, b = Borrowed(np.ascontiguousarray(data)), Borrowed(out)
        check(lib.dk_group_all_gather, _handle(group), a.pointer, b.pointer, None)
        return list(out)
    data_on_device, input_device = _on_comm_device(data, group)
    out = torch.empty((world_size,) + tuple(data_on_device.shape), dtype=data_on_device.dtype,
                      device=data_on_device.device)
    a, b = Borrowed(data_on_device), Borrowed(out)
    check(lib.dk_group_all_gather, _handle(group), a.pointer, b.pointer, None)
    return [cast_data_device(t, input_device) for t in out.unbind(0)]


def gather(data, dst: int = 0, group: Optional[ProcessGroup] = None) -> list:
    world_size = get_world_size(group)
    if world_size == 1:
        return [data]
    is_dst = get_rank(group) == dst
    data_on_device, input_device = _on_comm_device(data, group)
    out = None
    if is_dst:
        out = torch.empty((world_size,) + tuple(data_on_device.shape), dtype=data_on_device.dtype)
    a = Borrowed(data_on_device)
    b = Borrowed(out) if out is not None else None
    check(lib.dk_group_gather, _handle(group), a.pointer, b.pointer if b else None, dst, None)
    if not is_dst:
        return []
    return [cast_data_device(t, input_device) if input_device is not None else t for t in out.unbind(0)]


def broadcast(data, src: int = 0, group: Optional[ProcessGroup] = None) -> None:
    if get_world_size(group) > 1:
        data_on_device, input_device = _on_comm_device(data, group)
        if not _is_numpy(data_on_device):
            data_on_device = data_on_device.contiguous()
        view = Borrowed(data_on_device)
        check(lib.dk_group_broadcast, _handle(group), view.pointer, src, None)
        if get_rank(group) != src:
            _back(data_on_device, data, input_device)


def sync_random_seed(group: Optional[ProcessGroup] = None) -> int:
    seed = np.random.randint(2**31)
    if get_world_size(group) == 1:
        return seed
    if group is None:
        group = get_default_group()
    backend_device = get_comm_device(group)
    if get_rank(group) == 0:
        random_num = torch.tensor(seed, dtype=torch.int32).to(backend_device)
    else:
        random_num = torch.tensor(0, dtype=torch.int32).to(backend_device)
    broadcast(random_num, src=0, group=group)
    return random_num.item()


def all_gather_bytes(payload: bytes, group: Optional[ProcessGroup] = None) -> List[bytes]:
    """Every rank's raw bytes, in rank order (no pickling): the form ranks
    written in other languages (C, C++, Rust, Go) exchange objects in."""
    items = ctypes.POINTER(_lib.Bytes)()
    count = ctypes.c_size_t()
    check(lib.dk_group_all_gather_object, _handle(group), payload, len(payload),
          ctypes.byref(items), ctypes.byref(count))
    return take_items(items, count)


def broadcast_object_list(data: List[Any], src: int = 0, group: Optional[ProcessGroup] = None) -> None:
    assert isinstance(data, list)
    if get_world_size(group) > 1:
        is_src = get_rank(group) == src
        payloads = [pickle.dumps(obj) for obj in data] if is_src else []
        array = (_lib.Bytes * len(payloads))()
        buffers = [ctypes.create_string_buffer(p, len(p)) for p in payloads]
        for i, (p, buf) in enumerate(zip(payloads, buffers)):
            array[i].data = ctypes.cast(buf, ctypes.c_void_p)
            array[i].size = len(p)
        items = ctypes.POINTER(_lib.Bytes)()
        count = ctypes.c_size_t()
        check(lib.dk_group_broadcast_object_list, _handle(group), array, len(payloads), src,
              ctypes.byref(items), ctypes.byref(count))
        received = take_items(items, count)
        if not is_src:
            data[:] = [pickle.loads(b) for b in received]


def all_gather_object(data: Any, group: Optional[ProcessGroup] = None) -> List[Any]:
    if get_world_size(group) == 1:
        return [data]
    return [pickle.loads(b) for b in all_gather_bytes(pickle.dumps(data), group)]


def gather_object(data: Any, dst: int = 0, group: Optional[ProcessGroup] = None) -> Optional[List[Any]]:
    if get_world_size(group) == 1:
        return [data]
    items = ctypes.POINTER(_lib.Bytes)()
    count = ctypes.c_size_t()
    payload = pickle.dumps(data)
    check(lib.dk_group_gather_object, _handle(group), payload, len(payload), dst,
          ctypes.byref(items), ctypes.byref(count))
    if get_rank(group) != dst:
        return None
    return [pickle.loads(b) for b in take_items(items, count)]


def all_reduce_dict(data: dict, op: str = "sum", group: Optional[ProcessGroup] = None) -> None:
    assert isinstance(data, dict), "all_reduce_dict only supports dict type"
    if get_world_size(group) > 1:
        keys = sorted(data.keys())
        tensor_shapes = [data[k].shape for k in keys]
        tensor_numels = [data[k].numel() for k in keys]
        flatten_tensor = torch.cat([data[k].flatten() for k in keys])
        all_reduce(flatten_tensor, op=op, group=group)
        split_tensors = [x.reshape(shape) for x, shape in
                         zip(torch.split(flatten_tensor, tensor_numels), tensor_shapes)]
        for k, v in zip(keys, split_tensors):
            data[k] = v


def all_reduce_params(params, coalesce: bool = True, bucket_size_mb: int = -1, op: str = "sum",
                      group: Optional[ProcessGroup] = None) -> None:
    if get_world_size(group) == 1:
        return
    params_data = [param.data for param in params]
    code = _MEAN if op.lower() == "mean" else _get_reduce_op(op)
    views = [Borrowed(t) for t in params_data]
    array = (ctypes.POINTER(_lib.DLTensor) * len(views))(*[v.pointer for v in views])
    check(lib.dk_group_all_reduce_coalesced, _handle(group), array, len(views), code,
          1 if coalesce else 0, bucket_size_mb)


# ---- results -----------------------------------------------------------------------


def collect_results(results: list, size: int, device: str = "cpu", tmpdir: Optional[str] = None):
    if device not in ["gpu", "cpu", "npu"]:
        raise NotImplementedError(f"device must be 'cpu' , 'gpu' or 'npu', but got {device}")
    if device == "gpu" or device == "npu":
        assert tmpdir is None, f"tmpdir should be None when device is {device}"
        return _collect_results_device(results, size)
    return collect_results_cpu(results, size, tmpdir)


def collect_results_cpu(result_part: list, size: int, tmpdir: Optional[str] = None):
    rank, world_size = get_dist_info()
    if world_size == 1:
        return result_part[:size]
    if tmpdir is None:
        MAX_LEN = 512
        dir_tensor = torch.full((MAX_LEN,), 32, dtype=torch.uint8)
        if rank == 0:
            os.makedirs(".dist_test", exist_ok=True)
            tmpdir = tempfile.mkdtemp(dir=".dist_test")
            tmpdir = torch.tensor(bytearray(tmpdir.encode()), dtype=torch.uint8)
            dir_tensor[:len(tmpdir)] = tmpdir
        broadcast(dir_tensor, 0)
        tmpdir = dir_tensor.numpy().tobytes().decode().rstrip()
    else:
        os.makedirs(tmpdir, exist_ok=True)
    with open(os.path.join(tmpdir, f"part_{rank}.pkl"), "wb") as f:
        pickle.dump(result_part, f, protocol=2)
    barrier()
    if rank != 0:
        return None
    part_list = []
    for i in range(world_size):
        path = os.path.join(tmpdir, f"part_{i}.pkl")
        if not os.path.exists(path):
            raise FileNotFoundError(
                f"{tmpdir} is not an shared directory for rank {i}, please make sure {tmpdir} "
                f"is a shared directory for all ranks!")
        with open(path, "rb") as f:
            part_list.append(pickle.load(f))
    zipped_results = zip_longest(*part_list)
    ordered_results = [i for i in chain.from_iterable(zipped_results) if i is not None]
    ordered_results = ordered_results[:size]
    shutil.rmtree(tmpdir)
    return ordered_results


def _collect_results_device(result_part: list, size: int):
    rank, world_size = get_dist_info()
    if world_size == 1:
        return result_part[:size]
    part_list = all_gather_object(result_part)
    if rank == 0:
        zipped_results = zip_longest(*part_list)
        ordered_results = [i for i in chain.from_iterable(zipped_results) if i is not None]
        return ordered_results[:size]
    return None


def collect_results_gpu(result_part: list, size: int):
    return _collect_results_device(result_part, size)


__all__ = [
    "DistkitError", "ProcessGroup", "all_gather", "all_gather_object", "all_reduce",
    "all_reduce_dict", "all_reduce_params", "barrier", "broadcast", "broadcast_object_list",
    "cast_data_device", "collect_results", "collect_results_cpu", "collect_results_gpu",
    "destroy", "gather", "gather_object", "get_backend", "get_comm_device", "get_data_device",
    "get_default_group", "get_dist_info", "get_local_group", "get_local_rank", "get_local_size",
    "get_rank", "get_world_size", "infer_launcher", "init_dist", "init_local_group",
    "is_distributed", "is_main_process", "master_only", "new_group", "reduce",
    "sync_random_seed",
]
