"""torch.distributed's "distkit" backend in Python over the C ABI: the
fallback torch_backend uses when the C++ extension (distkit._c10d) cannot
load, saying why (torch_backend.implementation()). Its operations complete
before they return (``async_op=True`` gives a finished Work; see _done), so
torch's DDP cannot overlap its all_reduces with backward on it."""
import contextlib
import ctypes
import threading
from typing import List, Optional

import torch
import torch.distributed as tdist
from torch._C._distributed_c10d import _create_work_from_future

from . import _lib
from ._cuda_stream import follow_current_stream
from ._dlpack import Borrowed
from ._lib import lib, raise_for_status
from .dist import groups as _groups

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
    raise ValueError(f"distkit backend (Python fallback): unsupported reduce op {reduce_op}")


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


class ProcessGroupDistkitPython(tdist.ProcessGroup):
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
        if not _any_cuda(result):
            raise_for_status(fn, self._handle, *args, None)
        else:
            # The group's stream is set and the operation issued as one step
            # (_issue_lock), issued asynchronously so that the lock is not
            # held while it runs (a send on another thread may be what its
            # peer waits for); then waited for here, as the blocking form
            # would (a finished CUDA operation's device work is done).
            work = ctypes.c_void_p()
            with _issue_lock(self._handle):
                follow_current_stream(self._handle, result)
                raise_for_status(fn, self._handle, *args, ctypes.byref(work))
            try:
                raise_for_status(lib.dk_work_wait, work, -1)
            finally:
                lib.dk_work_destroy(work)
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
        # Lent as the other ops lend: non-contiguous tensors (a transpose)
        # through contiguous copies, written back after.
        lent = [_lend(t) for t in tensors]
        views = [view for view, _ in lent]
        # The ABI's coalesced all_reduce has only a blocking form: with CUDA
        # tensors the group's lock is held until it returns (see _run).
        with _issue_lock(self._handle) if _any_cuda(tensors) else contextlib.nullcontext():
            follow_current_stream(self._handle, tensors)
            raise_for_status(lib.dk_group_all_reduce_coalesced, self._handle,
                             _lib.tensor_array(views), len(views), op, 1, -1)
        for _, back in lent:
            if back is not None:
                back()
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
        # ProcessGroupGloo's checks, in its words (the C++ backend's too).
        if len(output_tensors) != 1:
            raise ValueError(f"distkit backend: allgather takes one list of {self.size()} outputs")
        outs = output_tensors[0]
        if len(outs) != self.size():
            raise RuntimeError(f"distkit backend: allgather: invalid output tensor list at index 0 "
                               f"(expected length {self.size()}, got {len(outs)})")
        for i, o in enumerate(outs):
            if o.dtype != t.dtype:
                raise RuntimeError(f"distkit backend: allgather: invalid tensor type at index {i} "
                                   f"(expected {t.dtype}, got {o.dtype})")
            if o.shape != t.shape:
                raise RuntimeError(f"distkit backend: allgather: invalid tensor size at index {i} "
                                   f"(expected {_sizes(t)}, got {_sizes(o)})")
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
        n = self.size()
        ins = outs = None
        if output_split_sizes or input_split_sizes:
            # torch's c10d::checkSplitSizes, in its words (the C++ backend's
            # too): splits count rows, one per rank, summing to dimension 0;
            # a side without splits divides its rows evenly.
            _check_split_sizes(input_split_sizes, input, n, "input")
            _check_split_sizes(output_split_sizes, output, n, "output")

            def elements(t, splits):
                row = t.numel() // t.shape[0] if t.shape[0] > 0 else 1
                return [s * row for s in (splits or [t.shape[0] // n] * n)]
            ins, outs = elements(input, input_split_sizes), elements(output, output_split_sizes)
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


def _check_split_sizes(splits, t: torch.Tensor, n: int, side: str) -> None:
    """torch's c10d::checkSplitSizes for alltoall_base's ``side``."""
    rows = t.size(0)  # a 0-dim tensor: IndexError, as torch's
    if not splits:
        if rows % n != 0:
            raise RuntimeError(f"distkit backend: alltoall_base: Tensor's dim 0 does not divide "
                               f"equally across group size ({side}: {rows} rows, no split sizes, "
                               f"{n} ranks)")
        return
    if len(splits) != n:
        raise RuntimeError(f"distkit backend: alltoall_base: Number of tensor splits not equal to "
                           f"group size ({side}: {len(splits)} split sizes, {n} ranks)")
    if any(s < 0 for s in splits):
        raise RuntimeError(f"distkit backend: alltoall_base: {side} split sizes must not be "
                           f"negative (got {list(splits)})")
    if sum(splits) != rows:
        raise RuntimeError(f"distkit backend: alltoall_base: Split sizes doesn't match total dim 0 "
                           f"size ({side}: split sizes sum to {sum(splits)}, dim 0 is {rows})")


def _sizes(t: torch.Tensor) -> str:
    """``t``'s shape as ProcessGroupGloo writes it: "(3, 2)"."""
    return "(" + ", ".join(str(d) for d in t.shape) + ")"


def _any_cuda(tensors) -> bool:
    return any(getattr(t, "is_cuda", False) for t in tensors)


# The lock under which a CUDA operation sets its group's stream and is
# issued, per group handle (None: the default group): the library keeps one
# caller stream per group, which an operation reads when issued, and sends
# and receives may come from several threads (the C ABI's convention 13).
_issue_locks = {}
_issue_locks_mu = threading.Lock()


def _issue_lock(handle) -> threading.Lock:
    key = getattr(handle, "value", handle)
    with _issue_locks_mu:
        return _issue_locks.setdefault(key, threading.Lock())


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

