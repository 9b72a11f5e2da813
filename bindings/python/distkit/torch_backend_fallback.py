"""torch.distributed's "distkit" backend in Python over the C ABI: the
fallback torch_backend uses when the C++ extension (distkit._c10d) cannot
load, saying why (torch_backend.implementation()). Its operations complete
before they return (``async_op=True`` gives a finished Work; see _done), so
torch's DDP cannot overlap its all_reduces with backward on it."""
import ctypes
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
        follow_current_stream(self._handle, tensors)
        # Lent as the other ops lend: non-contiguous tensors (a transpose)
        # through contiguous copies, written back after.
        lent = [_lend(t) for t in tensors]
        views = [view for view, _ in lent]
        raise_for_status(lib.dk_group_all_reduce_coalesced, self._handle, _lib.tensor_array(views),
                         len(views), op, 1, -1)
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

