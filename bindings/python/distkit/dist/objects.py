"""Object collectives: Python objects travel pickled, raw bytes as they are
(the form ranks written in other languages exchange objects in)."""
import ctypes
import pickle
from typing import Any, List, Optional

from .. import _lib
from .._lib import lib, take_items
from .call_forms import Form, choose
from .groups import ProcessGroup, get_group_rank, get_rank, get_world_size, handle_of, is_group
from .refusals import call_collective, fail_together, group_at


def bytes_array(payloads: List[bytes]):
    """A dk_bytes_t array over ``payloads``; the second value keeps the
    buffers alive for the call."""
    array = (_lib.Bytes * len(payloads))()
    buffers = [ctypes.create_string_buffer(p, len(p)) for p in payloads]
    for i, (p, buf) in enumerate(zip(payloads, buffers)):
        array[i].data = ctypes.cast(buf, ctypes.c_void_p)
        array[i].size = len(p)
    return array, buffers


@fail_together(group_at(1))
def all_gather_bytes(payload: bytes, group: Optional[ProcessGroup] = None) -> List[bytes]:
    """Every rank's raw bytes, in rank order (no pickling)."""
    items = ctypes.POINTER(_lib.Bytes)()
    count = ctypes.c_size_t()
    call_collective(lib.dk_group_all_gather_object, handle_of(group), payload, len(payload),
                    ctypes.byref(items), ctypes.byref(count))
    return take_items(items, count)


@fail_together(group_at(2))
def broadcast_object_list(data: List[Any], src: int = 0, group: Optional[ProcessGroup] = None) -> None:
    """In place, from ``src`` (a global rank, as in torch)."""
    assert isinstance(data, list)
    if get_world_size(group) > 1:
        root = get_group_rank(group, src)
        is_src = get_rank(group) == root
        array, keep = bytes_array([pickle.dumps(obj) for obj in data] if is_src else [])
        items = ctypes.POINTER(_lib.Bytes)()
        count = ctypes.c_size_t()
        call_collective(lib.dk_group_broadcast_object_list, handle_of(group), array, len(array),
                        root, ctypes.byref(items), ctypes.byref(count))
        del keep
        received = take_items(items, count)
        if not is_src:
            data[:] = [pickle.loads(b) for b in received]


_ALL_GATHER_OBJECT_FORMS = (
    Form("all_gather_object(object_list, obj, group=None)",
         lambda object_list, obj, group=None: None),
    Form("all_gather_object(data, group=None)", lambda data, group=None: None))


def _all_gather_object_group(args, kwargs):
    """all_gather_object's group, in either form (a second positional that is
    a group is mmengine's form's)."""
    if "group" in kwargs:
        return kwargs["group"]
    if len(args) >= 3:
        return args[2]
    return args[1] if len(args) == 2 and is_group(args[1]) else None


@fail_together(_all_gather_object_group)
def all_gather_object(*args, **kwargs):
    """mmengine's ``all_gather_object(data, group=None)`` returns every
    rank's object; the seed's (torch's) ``all_gather_object(object_list, obj,
    group=None)`` fills ``object_list`` (two arguments, the second not a
    group). A second positional None could be either, and is refused."""
    if len(args) >= 2 and args[1] is None:
        use_seed = None
    else:
        use_seed = ("obj" in kwargs or "object_list" in kwargs
                    or (len(args) >= 2 and not is_group(args[1])))
    seed, a = choose("all_gather_object", *_ALL_GATHER_OBJECT_FORMS, args, kwargs, use_seed)
    if not seed:
        return _all_gather_object(a["data"], a["group"])
    object_list = a["object_list"]
    gathered = _all_gather_object(a["obj"], a["group"])
    if len(object_list) != len(gathered):
        raise ValueError(f"all_gather_object: object_list has {len(object_list)} entries for a "
                         f"group of {len(gathered)} ranks")
    object_list[:] = gathered
    return None


@fail_together(group_at(1))
def _all_gather_object(data: Any, group: Optional[ProcessGroup]) -> List[Any]:
    if get_world_size(group) == 1:
        return [data]
    return [pickle.loads(b) for b in all_gather_bytes(pickle.dumps(data), group)]


_GATHER_OBJECT_FORMS = (
    Form("gather_object(obj, object_gather_list=None, dst=0, group=None)",
         lambda obj, object_gather_list=None, dst=0, group=None: None),
    Form("gather_object(data, dst=0, group=None)", lambda data, dst=0, group=None: None))


def gather_object(*args, **kwargs):
    """mmengine's ``gather_object(data, dst=0, group=None)`` returns the list
    on ``dst`` (None elsewhere); the seed's (torch's) ``gather_object(obj,
    object_gather_list=None, dst=0, group=None)`` fills
    ``object_gather_list`` on ``dst`` (a second argument that is a list or
    None, or those keywords). ``dst`` is a global rank."""
    use_seed = ("obj" in kwargs or "object_gather_list" in kwargs
                or (len(args) >= 2 and (args[1] is None or isinstance(args[1], list))))
    seed, a = choose("gather_object", *_GATHER_OBJECT_FORMS, args, kwargs, use_seed)
    group = a["group"]
    gathered = _gather_object(a["obj"] if seed else a["data"], a["dst"], group)
    if not seed:
        return gathered
    if gathered is not None:
        target = a["object_gather_list"]
        if target is None or len(target) != len(gathered):
            raise ValueError(f"gather_object: the destination needs an object_gather_list of "
                             f"{len(gathered)} entries")
        target[:] = gathered
    return None


@fail_together(group_at(2))
def _gather_object(data: Any, dst: int, group: Optional[ProcessGroup]) -> Optional[List[Any]]:
    if get_world_size(group) == 1:
        return [data]
    root = get_group_rank(group, dst)
    items = ctypes.POINTER(_lib.Bytes)()
    count = ctypes.c_size_t()
    payload = pickle.dumps(data)
    call_collective(lib.dk_group_gather_object, handle_of(group), payload, len(payload), root,
                    ctypes.byref(items), ctypes.byref(count))
    if get_rank(group) != root:
        return None
    return [pickle.loads(b) for b in take_items(items, count)]
