"""torch.distributed's backend "distkit": c10d process groups whose
collectives run on distkit's groups (shared memory on one host, Gloo across
hosts), so torch's own DistributedDataParallel, DistributedSampler and any
code written against torch.distributed run on distkit.

    import distkit.torch_backend                    # registers "distkit"
    torch.distributed.init_process_group("distkit", init_method=..., rank=r, world_size=n)

``distkit.dist.init_dist(...)`` initializes torch.distributed's default
group on this backend itself (as mmengine's init_dist initializes
torch.distributed), over the same ranks and connections, with torch's keys
in distkit's job store (``DistkitStore``). Started alone, the default group
joins distkit through the store torch gives it. ``new_group(ranks)`` makes a
distkit subgroup of its members (``dk_group_new_named``). Ranks torch passes
to a process group are the group's own ranks, as the C ABI takes them.

torch 1.13's c10d accepts Python subclasses of ``ProcessGroup`` and
``Store`` (its own tests use them), so this is Python over the C ABI: no
extension module to build against torch's C++ ABI. Operations complete
before they return (``async_op=True`` gives a finished Work): see _done.
"""
import ctypes
import datetime
import uuid
from typing import List, Optional

import torch
import torch.distributed as tdist
from torch._C._distributed_c10d import _create_work_from_future

from . import _lib
from ._cuda_stream import follow_current_stream
from ._dlpack import Borrowed
from ._lib import lib, raise_for_status
from .dist import groups as _groups
from .dist import torch_groups, torch_join

BACKEND = "distkit"

_OPS = {
    tdist.ReduceOp.SUM: _lib.OP_SUM, tdist.ReduceOp.PRODUCT: _lib.OP_PRODUCT,
    tdist.ReduceOp.MIN: _lib.OP_MIN, tdist.ReduceOp.MAX: _lib.OP_MAX,
    tdist.ReduceOp.BAND: _lib.OP_BAND, tdist.ReduceOp.BOR: _lib.OP_BOR,
    tdist.ReduceOp.BXOR: _lib.OP_BXOR,
}
if hasattr(tdist.ReduceOp, "AVG"):
    _OPS[tdist.ReduceOp.AVG] = _lib.OP_MEAN


def _op(reduce_op) -> int:
    for torch_op, code in _OPS.items():
        if reduce_op == torch_op:
            return code
    raise ValueError(f"distkit backend: unsupported reduce op {reduce_op}")


# ---- the store -----------------------------------------------------------------


class DistkitStore(tdist.Store):
    """torch's Store interface over a distkit store (dk_store_t*), keys under
    ``prefix``: torch's rendezvous and Gloo subgroups keep their keys in
    distkit's job store."""

    def __init__(self, handle: ctypes.c_void_p, prefix: str = "torch/"):
        super().__init__()
        self._handle = handle
        self._prefix = prefix
        self._init_barrier_size = None  # see init_default_group

    def _key(self, key: str) -> bytes:
        return (self._prefix + key).encode()

    def set(self, key, value):
        data = value if isinstance(value, (bytes, bytearray)) else str(value).encode()
        raise_for_status(lib.dk_store_set, self._handle, self._key(key), bytes(data), len(data))

    def get(self, key):
        out, size = ctypes.c_void_p(), ctypes.c_size_t()
        raise_for_status(lib.dk_store_get, self._handle, self._key(key), ctypes.byref(out),
                         ctypes.byref(size))
        try:
            return ctypes.string_at(out, size.value) if size.value else b""
        finally:
            lib.dk_free(out)

    def add(self, key, value):
        if key.startswith("store_based_barrier_key"):
            if self._init_barrier_size is not None:
                return self._init_barrier_size
            if torch_groups.making():  # see torch_groups: the twin's collective synchronized
                return tdist.get_world_size()
        out = ctypes.c_int64()
        raise_for_status(lib.dk_store_add, self._handle, self._key(key), int(value),
                         ctypes.byref(out))
        return out.value

    def _keys(self, keys):
        return (ctypes.c_char_p * len(keys))(*[self._key(k) for k in keys])

    def wait(self, keys, timeout=None):
        ms = -1 if timeout is None else int(timeout.total_seconds() * 1000)
        raise_for_status(lib.dk_store_wait, self._handle, self._keys(keys), len(keys), ms)

    def check(self, keys):
        out = ctypes.c_int32()
        raise_for_status(lib.dk_store_check, self._handle, self._keys(keys), len(keys),
                         ctypes.byref(out))
        return bool(out.value)

    def compare_set(self, key, expected, desired):
        e = expected if isinstance(expected, bytes) else str(expected).encode()
        d = desired if isinstance(desired, bytes) else str(desired).encode()
        out, size = ctypes.c_void_p(), ctypes.c_size_t()
        raise_for_status(lib.dk_store_compare_set, self._handle, self._key(key), e, len(e), d,
                         len(d), ctypes.byref(out), ctypes.byref(size))
        try:
            return ctypes.string_at(out, size.value) if size.value else b""
        finally:
            lib.dk_free(out)

    def delete_key(self, key):
        out = ctypes.c_int32()
        raise_for_status(lib.dk_store_delete_key, self._handle, self._key(key), ctypes.byref(out))
        return bool(out.value)

    def num_keys(self):
        out = ctypes.c_int64()
        raise_for_status(lib.dk_store_num_keys, self._handle, ctypes.byref(out))
        return out.value

    def set_timeout(self, timeout):
        pass  # the store's own timeout applies

    def __del__(self):
        if getattr(self, "_handle", None):
            lib.dk_store_destroy(self._handle)
            self._handle = None


def job_store(prefix: str = "torch/") -> DistkitStore:
    """distkit's job store (after init_dist) as a torch Store."""
    handle = ctypes.c_void_p()
    raise_for_status(lib.dk_default_store, ctypes.byref(handle))
    return DistkitStore(handle, prefix)


# ---- work ------------------------------------------------------------------------


def _done(result: List[torch.Tensor]):
    """A finished c10d Work whose future holds ``result`` (the op's output
    tensors, as c10d's futures do; DDP's communication hooks read them).

    The operations complete before they return: c10d's C++ callers (DDP's
    reducer, parameter verification) hold a Work past the Python object
    that would answer its wait(), so a Python Work subclass would block
    them forever; a Work made from a completed future answers in C++."""
    future = torch.futures.Future()
    future.set_result(result)
    return _create_work_from_future(future)


# ---- the process group -------------------------------------------------------------


class ProcessGroupDistkit(tdist.ProcessGroup):
    """A c10d ProcessGroup over one distkit group (``group`` None: distkit's
    default group)."""

    def __init__(self, rank: int, size: int, group: Optional[_groups.ProcessGroup]):
        super().__init__(rank, size)
        self._dk_group = group  # keeps the handle alive
        self._handle = group._handle if group is not None else None

    def getBackendName(self):
        return BACKEND

    def _run(self, fn, args, keep, result, then=None):
        """Runs ABI collective ``fn`` on this group (``keep``: what it
        borrows), then ``then`` (results into torch's tensors)."""
        follow_current_stream(self._handle, result)
        raise_for_status(fn, self._handle, *args, None)
        if then is not None:
            then()
        del keep
        return _done(result)

    # -- reductions --

    def allreduce(self, tensors, opts=None):
        t = _single(tensors, "allreduce")
        op = _op(opts.reduceOp) if opts is not None else _lib.OP_SUM
        view, back = _lend(t)
        return self._run(lib.dk_group_all_reduce, (view.pointer, op), [view], [t], back)

    def allreduce_coalesced(self, tensors, opts=None):
        op = _op(opts.reduceOp) if opts is not None else _lib.OP_SUM
        views = [Borrowed(t) for t in tensors]
        raise_for_status(lib.dk_group_all_reduce_coalesced, self._handle, _lib.tensor_array(views),
                         len(views), op, 1, -1)
        return _done(list(tensors))

    def reduce(self, tensors, opts):
        t = _single(tensors, "reduce")
        view, back = _lend(t)
        return self._run(lib.dk_group_reduce, (view.pointer, _op(opts.reduceOp), opts.rootRank),
                         [view], [t], back)

    def reduce_scatter(self, output_tensors, input_tensors, opts):
        out = _single(output_tensors, "reduce_scatter")
        flat = torch.cat([t.reshape(-1) for t in input_tensors[0]])
        return self._reduce_scatter(out, flat, opts)

    def _reduce_scatter_base(self, output, input, opts):
        return self._reduce_scatter(output, input.reshape(-1), opts)

    def _reduce_scatter(self, out, flat, opts):
        a = Borrowed(flat.contiguous())
        b, back = _lend(out)
        return self._run(lib.dk_group_reduce_scatter, (a.pointer, b.pointer, _op(opts.reduceOp)),
                         [a, b, flat], [out], back)

    # -- data movement --

    def broadcast(self, tensors, opts):
        t = _single(tensors, "broadcast")
        view, back = _lend(t)
        return self._run(lib.dk_group_broadcast, (view.pointer, opts.rootRank), [view], [t], back)

    def allgather(self, output_tensors, input_tensors, opts=None):
        t = _single(input_tensors, "allgather")
        outs = output_tensors[0]
        flat = torch.empty((len(outs),) + tuple(t.shape), dtype=t.dtype, device=t.device)
        a, b = Borrowed(t.contiguous()), Borrowed(flat)

        def fill():
            for slot, value in zip(outs, flat.unbind(0)):
                slot.copy_(value)
        return self._run(lib.dk_group_all_gather, (a.pointer, b.pointer), [a, b, flat],
                         list(outs), fill)

    def _allgather_base(self, output, input, opts=None):
        a = Borrowed(input.contiguous())
        b, back = _lend(output)
        return self._run(lib.dk_group_all_gather, (a.pointer, b.pointer), [a, b], [output], back)

    def gather(self, output_tensors, input_tensors, opts):
        t = _single(input_tensors, "gather")
        is_root = self.rank() == opts.rootRank
        outs = output_tensors[0] if is_root else []
        flat = (torch.empty((self.size(),) + tuple(t.shape), dtype=t.dtype, device=t.device)
                if is_root else None)
        a = Borrowed(t.contiguous())
        b = Borrowed(flat) if is_root else None

        def fill():
            for slot, value in zip(outs, flat.unbind(0) if is_root else []):
                slot.copy_(value)
        return self._run(lib.dk_group_gather, (a.pointer, b.pointer if b else None, opts.rootRank),
                         [a, b, flat], list(outs), fill)

    def scatter(self, output_tensors, input_tensors, opts):
        out = _single(output_tensors, "scatter")
        is_root = self.rank() == opts.rootRank
        flat = torch.stack([x.contiguous() for x in input_tensors[0]]) if is_root else None
        a = Borrowed(flat) if is_root else None
        b, back = _lend(out)
        return self._run(lib.dk_group_scatter, (a.pointer if a else None, b.pointer, opts.rootRank),
                         [a, b, flat], [out], back)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        def elements(t, splits):
            if not splits:
                return None
            row = t[0].numel() if t.dim() > 0 and t.shape[0] > 0 else 0
            return [s * row for s in splits]
        ins, outs = elements(input, input_split_sizes), elements(output, output_split_sizes)
        if (ins is None) != (outs is None):  # one side even: its equal parts
            n = self.size()
            ins = ins or [input.numel() // n] * n
            outs = outs or [output.numel() // n] * n
        a = Borrowed(input.contiguous())
        b, back = _lend(output)
        if ins is None:
            return self._run(lib.dk_group_all_to_all, (a.pointer, None, b.pointer, None, 0),
                             [a, b], [output], back)
        in_arr = (ctypes.c_int64 * len(ins))(*ins)
        out_arr = (ctypes.c_int64 * len(outs))(*outs)
        return self._run(lib.dk_group_all_to_all, (a.pointer, in_arr, b.pointer, out_arr, len(ins)),
                         [a, b, in_arr, out_arr], [output], back)

    def alltoall(self, output_tensors, input_tensors, opts=None):
        flat_in = torch.cat([t.reshape(-1) for t in input_tensors])
        flat_out = torch.empty(sum(t.numel() for t in output_tensors), dtype=flat_in.dtype,
                               device=flat_in.device)
        ins = [t.numel() for t in input_tensors]
        outs = [t.numel() for t in output_tensors]
        a, b = Borrowed(flat_in), Borrowed(flat_out)
        in_arr = (ctypes.c_int64 * len(ins))(*ins)
        out_arr = (ctypes.c_int64 * len(outs))(*outs)

        def fill():
            at = 0
            for t in output_tensors:
                t.copy_(flat_out[at:at + t.numel()].view_as(t))
                at += t.numel()
        return self._run(lib.dk_group_all_to_all,
                         (a.pointer, in_arr, b.pointer, out_arr, len(ins)),
                         [a, b, flat_in, flat_out, in_arr, out_arr], list(output_tensors), fill)

    def barrier(self, opts=None):
        return self._run(lib.dk_group_barrier, (), [], [])

    def monitored_barrier(self, opts=None, wait_all_ranks=False):
        return self.barrier(opts)

    # -- point to point --

    def send(self, tensors, dst, tag):
        t = _single(tensors, "send")
        view = Borrowed(t.contiguous())
        return self._run(lib.dk_group_send, (view.pointer, dst, tag), [view], [t])

    def recv(self, tensors, src, tag):
        t = _single(tensors, "recv")
        view, back = _lend(t)
        return self._run(lib.dk_group_recv, (view.pointer, src, tag), [view], [t], back)

    def recv_anysource(self, tensors, tag):
        raise RuntimeError("distkit backend: recv from any source is not supported; "
                           "name the source rank")


def _single(tensors, what) -> torch.Tensor:
    if len(tensors) != 1:
        raise ValueError(f"distkit backend: {what} takes one tensor per rank (one device), "
                         f"got {len(tensors)}")
    return tensors[0]


def _lend(t: torch.Tensor):
    """(a view the library writes, what copies it back): the tensor itself
    when contiguous, else a contiguous copy written back after."""
    if t.is_contiguous():
        return Borrowed(t), None
    tmp = t.contiguous()
    return Borrowed(tmp), lambda: t.copy_(tmp)


# ---- creating groups -------------------------------------------------------------


def _create(store, rank: int, size: int, timeout: datetime.timedelta) -> ProcessGroupDistkit:
    """c10d's creator: the default group (torch.distributed not initialized
    yet) or a subgroup of its members."""
    if not tdist.is_initialized():
        if lib.dk_is_distributed() == 1:
            if (_groups.get_rank(), _groups.get_world_size()) != (rank, size):
                raise RuntimeError(
                    f"distkit backend: torch's default group is rank {rank} of {size}, distkit's "
                    f"job rank {_groups.get_rank()} of {_groups.get_world_size()}")
            return ProcessGroupDistkit(rank, size, None)
        world = torch_join.join(store=store, rank=rank, size=size,
                                timeout_ms=int(timeout.total_seconds() * 1000))
        _groups._adopt_world(world)
        return ProcessGroupDistkit(rank, size, None)
    adopted = torch_groups.adopted()
    if adopted is not None:  # distkit.dist.new_group: the twin it made (dist/torch_groups.py)
        if (adopted.rank(), adopted.size()) != (rank, size):
            raise RuntimeError(f"distkit backend: the group to adopt is rank {adopted.rank()} of "
                               f"{adopted.size()}, torch's rank {rank} of {size}")
        return ProcessGroupDistkit(rank, size, adopted)
    # A subgroup: its members learn each other's default-group ranks and a
    # name for the group's rendezvous through torch's per-group store.
    store.set(f"distkit/member/{rank}", str(tdist.get_rank()))
    members = [int(store.get(f"distkit/member/{r}")) for r in range(size)]
    if rank == 0:
        store.set("distkit/name", uuid.uuid4().hex)
    name = store.get("distkit/name").decode()
    ranks = (ctypes.c_int32 * size)(*members)
    handle = ctypes.c_void_p()
    raise_for_status(lib.dk_group_new_named, _groups.handle_of(None), ranks, size, name.encode(),
                     ctypes.byref(handle))
    return ProcessGroupDistkit(rank, size, _groups.ProcessGroup(handle))


_registered = False


def register() -> None:
    """Registers the "distkit" backend with torch.distributed (once)."""
    global _registered
    if not _registered:
        if not hasattr(tdist.Backend, BACKEND.upper()):
            tdist.Backend.register_backend(BACKEND, _create)
        _registered = True


def init_default_group(timeout_ms: int) -> bool:
    """After distkit's init_dist: torch.distributed's default group on this
    backend, over distkit's ranks and store. False (nothing done) when user
    code initialized torch.distributed already. Either way, torch's group
    for the node-local group init_dist made (groups.local_group_to_torch)."""
    if not tdist.is_available():
        return False
    if tdist.is_initialized():
        _groups.local_group_to_torch()
        return False
    register()
    store = job_store()
    # torch's init ends with a barrier in the store that counts every rank
    # in. distkit's world has every rank joined already (dk_init), and in a
    # job whose other ranks are C, C++, Rust or Go they would never count
    # in: the count is answered at once.
    store._init_barrier_size = _groups.get_world_size()
    try:
        tdist.init_process_group(BACKEND, store=store, rank=_groups.get_rank(),
                                 world_size=_groups.get_world_size(),
                                 timeout=datetime.timedelta(milliseconds=timeout_ms))
    finally:
        store._init_barrier_size = None
    _groups.local_group_to_torch()
    return True


register()
