"""Object collectives: Python objects travel pickled, raw bytes as they are
(the form ranks written in other languages exchange objects in)."""
import ctypes
import pickle
from typing import Any, List, Optional

from .. import _lib
from .._lib import check, lib, take_items
from .groups import ProcessGroup, get_rank, get_world_size, handle_of


def bytes_array(payloads: List[bytes]):
    """A dk_bytes_t array over ``payloads``; the second value keeps the
    buffers alive for the call."""
    array = (_lib.Bytes * len(payloads))()
    buffers = [ctypes.create_string_buffer(p, len(p)) for p in payloads]
    for i, (p, buf) in enumerate(zip(payloads, buffers)):
        array[i].data = ctypes.cast(buf, ctypes.c_void_p)
        array[i].size = len(p)
    return array, buffers


def all_gather_bytes(payload: bytes, group: Optional[ProcessGroup] = None) -> List[bytes]:
    """Every rank's raw bytes, in rank order (no pickling)."""
    items = ctypes.POINTER(_lib.Bytes)()
    count = ctypes.c_size_t()
    check(lib.dk_group_all_gather_object, handle_of(group), payload, len(payload),
          ctypes.byref(items), ctypes.byref(count))
    return take_items(items, count)


def broadcast_object_list(data: List[Any], src: int = 0, group: Optional[ProcessGroup] = None) -> None:
    assert isinstance(data, list)
    if get_world_size(group) > 1:
        is_src = get_rank(group) == src
        array, keep = bytes_array([pickle.dumps(obj) for obj in data] if is_src else [])
        items = ctypes.POINTER(_lib.Bytes)()
        count = ctypes.c_size_t()
        check(lib.dk_group_broadcast_object_list, handle_of(group), array, len(array), src,
              ctypes.byref(items), ctypes.byref(count))
        del keep
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
    check(lib.dk_group_gather_object, handle_of(group), payload, len(payload), dst,
          ctypes.byref(items), ctypes.byref(count))
    if get_rank(group) != dst:
        return None
    return [pickle.loads(b) for b in take_items(items, count)]
