"""collect_results: a sharded evaluation's results back in dataset order on
rank 0, through the library (dk_group_collect_results), so Python ranks and
ranks in other languages collect into one list. Each result travels as its
own pickle; None travels as an empty item, which the library drops, as
mmengine does."""
import ctypes
import os
import pickle
from typing import Optional

from .. import _lib, errors
from .._lib import lib, take_items
from .call_forms import Form, choose
from .groups import get_world_size, handle_of
from .objects import bytes_array
from .refusals import call_collective, fail_together


_DEVICES = ("cpu", "gpu", "npu")
_RESULTS_FORMS = (
    Form("collect_results(result_part, size, tmpdir=None)",
         lambda result_part, size, tmpdir=None: None),
    Form("collect_results(results, size, device='cpu', tmpdir=None)",
         lambda results, size, device="cpu", tmpdir=None: None))


def collect_results(*args, **kwargs):
    """mmengine's ``collect_results(results, size, device='cpu',
    tmpdir=None)``, and the seed's ``collect_results(result_part, size,
    tmpdir=None)``: ``result_part=``, or a third positional argument that
    is a path (str or os.PathLike) or None but not a device name (cpu, gpu,
    npu), is the seed's form."""
    third = args[2] if len(args) > 2 else "cpu"
    path = third is None or isinstance(third, os.PathLike) or (
        isinstance(third, str) and third not in _DEVICES)
    seed, a = choose("collect_results", *_RESULTS_FORMS, args, kwargs,
                     "result_part" in kwargs or path)
    if seed:
        return _collect_results(a["result_part"], a["size"], "cpu", a["tmpdir"])
    return _collect_results(a["results"], a["size"], a["device"], a["tmpdir"])


def _collect_results(results: list, size: int, device: str = "cpu", tmpdir=None):
    if device not in _DEVICES:
        raise NotImplementedError(f"device must be 'cpu' , 'gpu' or 'npu', but got {device}")
    if device == "gpu" or device == "npu":
        assert tmpdir is None, f"tmpdir should be None when device is {device}"
    return _collect(results, size, device, tmpdir)


def collect_results_cpu(result_part: list, size: int, tmpdir=None):
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
                        _lib.c_string("tmpdir", os.fspath(tmpdir)) if tmpdir is not None
                        else None,
                        ctypes.byref(items), ctypes.byref(count))
    except errors.NotFoundError as e:  # mmengine: a tmpdir some rank cannot see
        missing = FileNotFoundError(e.message)
        missing._distkit_told = True  # the library's error, on every rank
        raise missing from e
    del keep
    if not items:
        return None  # not rank 0
    return [pickle.loads(b) for b in take_items(items, count)]
