"""collect_results: a sharded evaluation's results back in dataset order on
rank 0, through the library (dk_group_collect_results), so Python ranks and
ranks in other languages collect into one list. Each result travels as its
own pickle; None travels as an empty item, which the library drops, as
mmengine does."""
import ctypes
import pickle
from typing import Optional

from .. import _lib, errors
from .._lib import lib, take_items
from .groups import get_world_size, handle_of
from .objects import bytes_array
from .refusals import call_collective, fail_together


def collect_results(results: list, size: int, *args, **kwargs):
    """mmengine's ``collect_results(results, size, device='cpu',
    tmpdir=None)``, and the seed's ``collect_results(result_part, size,
    tmpdir=None)``: a third positional argument that is not a device name
    (cpu, gpu, npu) is the tmpdir."""
    if args and (args[0] is None
                 or isinstance(args[0], str) and args[0] not in ("cpu", "gpu", "npu")):
        if len(args) > 1 or "tmpdir" in kwargs:
            raise TypeError(f"collect_results: {args[0]!r} is not a device (cpu, gpu, npu), so it "
                            f"is the tmpdir of collect_results(result_part, size, tmpdir=None), "
                            f"and the tmpdir is given twice")
        return _collect_results(results, size, "cpu", args[0], **kwargs)
    return _collect_results(results, size, *args, **kwargs)


def _collect_results(results: list, size: int, device: str = "cpu", tmpdir: Optional[str] = None):
    if device not in ["gpu", "cpu", "npu"]:
        raise NotImplementedError(f"device must be 'cpu' , 'gpu' or 'npu', but got {device}")
    if device == "gpu" or device == "npu":
        assert tmpdir is None, f"tmpdir should be None when device is {device}"
    return _collect(results, size, device, tmpdir)


def collect_results_cpu(result_part: list, size: int, tmpdir: Optional[str] = None):
    return _collect(result_part, size, "cpu", tmpdir)


def collect_results_gpu(result_part: list, size: int):
    return _collect(result_part, size, "gpu", None)


# A result that cannot be pickled is refused on every rank (the others are
# told, not left waiting in the call for a rank that never came).
@fail_together(lambda args, kwargs: None)
def _collect(part: list, size: int, device: str, tmpdir: Optional[str]):
    if get_world_size() == 1:
        return part[:size]  # mmengine returns the caller's own objects here
    array, keep = bytes_array([b"" if r is None else pickle.dumps(r) for r in part])
    items = ctypes.POINTER(_lib.Bytes)()
    count = ctypes.c_size_t()
    try:
        call_collective(lib.dk_group_collect_results, handle_of(None), array, len(array), size,
                        _lib.c_string("device", device),
                        _lib.c_string("tmpdir", tmpdir) if tmpdir is not None else None,
                        ctypes.byref(items), ctypes.byref(count))
    except errors.NotFoundError as e:  # mmengine: a tmpdir some rank cannot see
        missing = FileNotFoundError(e.message)
        missing._distkit_told = True  # the library's error, on every rank
        raise missing from e
    del keep
    if not items:
        return None  # not rank 0
    return [pickle.loads(b) for b in take_items(items, count)]
