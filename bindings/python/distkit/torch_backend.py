"""torch.distributed's backend "distkit": c10d process groups whose
collectives run on distkit's groups (shared memory on one host, Gloo across
hosts), so torch's own DistributedDataParallel, DistributedSampler and any
code written against torch.distributed run on distkit.

    import distkit                                  # registers "distkit"
    torch.distributed.init_process_group("distkit", init_method=..., rank=r, world_size=n)

``distkit.dist.init_dist(...)`` initializes torch.distributed's default
group on this backend itself (as mmengine's init_dist initializes
torch.distributed), over the same ranks and connections, with torch's keys
in distkit's job store (``DistkitStore``). Started alone, the default group
joins distkit through the store torch gives it. Started by user code after
distkit joined the job (init_dist, then destroy_process_group and
init_process_group("distkit", timeout=...)), it runs on a distkit group of
every rank with that timeout (none given: distkit's default group, with
init_dist's). ``new_group(ranks)`` makes a
distkit subgroup of its members (``dk_group_new_with_options``, with the
timeout new_group is given). Ranks torch passes
to a process group are the group's own ranks, as the C ABI takes them.

The process groups are C++ (the extension ``distkit._c10d``, a c10d
ProcessGroup over the C ABI, bindings/python/c10d): every operation returns
at once with a Work that distkit's completion callback completes, so
``async_op=True`` overlaps and torch's DDP overlaps its bucket all_reduces
with backward. Where the extension cannot load (not built, another torch
or Python than it was built for) or ``DISTKIT_TORCH_BACKEND=python`` asks
for it, a Python process group over the C ABI stands in
(torch_backend_fallback.py), whose operations complete before they
return; it warns once, saying why, and ``implementation()`` tells.

torch 2.x registers backends per device and wraps them in its own
ProcessGroup; the extension then extends c10d's Backend
(bindings/python/c10d/build_without_bazel.sh builds it against the torch at
hand; tools/gpu_check_python.py runs it on torch 2.11 with CUDA). The Python
fallback is 1.13's only.
"""
import atexit
import ctypes
import datetime
import importlib.util
import inspect
import os
import uuid
import warnings
from typing import Optional, Tuple

import torch.distributed as tdist

from ._lib import GroupOptions, c_string, lib, raise_for_status
from ._millis import to_millis
from .dist import groups as _groups
from .dist import torch_groups, torch_join

BACKEND = "distkit"


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
        return c_string("store key", self._prefix + key)

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
        ms = to_millis(timeout)  # None: -1, the store's
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


# The stores torch's groups were made over. torch 2.x keeps only the C++
# PrefixStore around them (pg_map), which does not keep the Python object
# alive: once collected, every call through it into Python fails ("fn
# INTERNAL ASSERT FAILED ... Not implemented", as torch.distributed.new_group
# did on torch 2.11) and __del__ would have freed its handle. torch 1.13
# kept the Python object itself.
_stores_in_use = []


def job_store(prefix: str = "torch/") -> DistkitStore:
    """distkit's job store (after init_dist) as a torch Store."""
    handle = ctypes.c_void_p()
    raise_for_status(lib.dk_default_store, ctypes.byref(handle))
    return DistkitStore(handle, prefix)


def _store_for_torch(prefix: str = "torch/") -> DistkitStore:
    """job_store(prefix), kept alive for as long as the process: torch's
    groups may use it until the end (see _stores_in_use)."""
    store = job_store(prefix)
    _stores_in_use.append(store)
    return store


# ---- the process groups -------------------------------------------------------


def _extension_candidates():
    given = os.environ.get("DISTKIT_C10D_EXTENSION")
    if given:
        yield given
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, "_c10d.so")  # the packaged form
    # Bazel: <runfiles>/distkit/bindings/python/distkit -> .../bindings/python/c10d
    yield os.path.join(here, "..", "c10d", "_c10d.so")
    runfiles = os.environ.get("RUNFILES_DIR")
    if runfiles:
        yield os.path.join(runfiles, "distkit", "bindings", "python", "c10d", "_c10d.so")


_extension = None  # distkit._c10d once loaded
_fallback_reason: Optional[str] = None  # why not, when it could not be
_warned = False


def _load_extension() -> None:
    global _extension, _fallback_reason
    if os.environ.get("DISTKIT_TORCH_BACKEND", "") == "python":
        _fallback_reason = "DISTKIT_TORCH_BACKEND=python asks for it"
        return
    tried = []
    for path in _extension_candidates():
        if not os.path.exists(path):
            tried.append(path)
            continue
        try:
            spec = importlib.util.spec_from_file_location("distkit._c10d", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            module.init(lib._handle)  # the C ABI of the library ctypes loaded
        except Exception as e:  # noqa: BLE001 - any failure means the fallback, said why
            _fallback_reason = f"the C++ extension {path} cannot load: {e}"
            return
        _extension = module
        # Completions still queued run before the interpreter finalizes
        # (their tensors and callbacks need it; completion_pool.h).
        atexit.register(module._drain, 10.0)
        return
    _fallback_reason = "the C++ extension _c10d.so is not installed (tried " + ", ".join(
        tried) + ")"


def implementation() -> Tuple[str, Optional[str]]:
    """("c++", None) when the "distkit" backend's groups are the C++
    extension's; ("python", why) when they are the Python fallback's."""
    return ("c++", None) if _extension is not None else ("python", _fallback_reason)


# The distkit groups the C++ process groups run on, each beside its process
# group's liveness. The wrapper's attribute `_dk_group` cannot keep one alive:
# torch 2.x keeps the backend in C++ alone and drops the Python wrapper, whose
# collection would destroy the group (dk_group_destroy) under the backend.
# torch offers no hook when it destroys a group, so an entry is released once
# its process group no longer exists, looked at whenever a group is made.
_groups_in_use = []  # [(_c10d._Liveness, groups.ProcessGroup)]


def _release_unused_groups() -> None:
    """Releases the distkit groups whose C++ process group is gone."""
    _groups_in_use[:] = [(live, group) for live, group in _groups_in_use if live.alive()]


def _process_group(rank: int, size: int, group: Optional[_groups.ProcessGroup]):
    """torch's process group over distkit group ``group`` (None: distkit's
    default group, whichever it is at each call; torch's default group is
    given distkit's default group of the moment instead, so that one a DDP
    model still holds after a shrink or grow fails on the old world rather
    than running on the new one at the old rank and size); it keeps
    ``group`` as ``_dk_group`` (torch_groups.twin reads it), and
    _groups_in_use keeps it alive as long as the C++ one."""
    global _warned
    if _extension is not None:
        _release_unused_groups()
        handle = group._handle.value if group is not None else None
        pg = _extension.ProcessGroupDistkit(rank, size, handle or 0)
        pg._dk_group = group
        if group is not None:
            _groups_in_use.append((pg._liveness(), group))
        return pg
    if not _warned:
        _warned = True
        warnings.warn(f"distkit: torch.distributed's \"distkit\" backend runs on its Python "
                      f"fallback, whose operations complete before they return (no overlap in "
                      f"DDP): {_fallback_reason}", RuntimeWarning, stacklevel=3)
    from .torch_backend_fallback import ProcessGroupDistkitPython
    return ProcessGroupDistkitPython(rank, size, group)


# ---- creating groups -------------------------------------------------------------


def _create(store, rank: int, size: int, timeout: datetime.timedelta):
    """c10d's creator: the default group (torch.distributed not initialized
    yet) or a subgroup of its members."""
    if not tdist.is_initialized():
        if lib.dk_is_distributed() == 1:
            if (_groups.get_rank(), _groups.get_world_size()) != (rank, size):
                raise RuntimeError(
                    f"distkit backend: torch's default group is rank {rank} of {size}, distkit's "
                    f"job rank {_groups.get_rank()} of {_groups.get_world_size()}")
            if _init_from_distkit or not _timeout_given(timeout):
                return _process_group(rank, size, _groups.library_default_group())
            # distkit's job was joined first (init_dist, then torch's own
            # init_process_group): its default group keeps init_dist's
            # timeout, so torch's group is one of every rank with the
            # timeout given (its operations fail after it, as Gloo's do).
            return _process_group(rank, size, _new_group(store, rank, size, list(range(size)),
                                                         timeout))
        timeout_ms = to_millis(timeout)
        world = torch_join.join(store=store, rank=rank, size=size, timeout_ms=timeout_ms,
                                op_timeout_ms=timeout_ms)
        _groups._adopt_world(world)
        return _process_group(rank, size, _groups.library_default_group())
    adopted = torch_groups.adopted()
    if adopted is not None:  # distkit.dist.new_group: the twin it made (dist/torch_groups.py)
        if (adopted.rank(), adopted.size()) != (rank, size):
            raise RuntimeError(f"distkit backend: the group to adopt is rank {adopted.rank()} of "
                               f"{adopted.size()}, torch's rank {rank} of {size}")
        return _process_group(rank, size, adopted)
    # A subgroup: its members learn each other's default-group ranks and a
    # name for the group's rendezvous through torch's per-group store. That
    # store may hold an earlier group's keys under the same torch name (a
    # store that outlived a destroy_process_group, which restarts torch's
    # group count): each making of the group has keys of its own, the n-th
    # (every member counts in once; no member is done with the n-th before
    # all counted in, so none can count into the next one early), and a
    # member never reads the name rank 0 wrote for an earlier one.
    if not _groups.joined() and size < tdist.get_world_size():
        # torch makes a group's backend on its members only, and distkit's
        # joining of torch's job needs every rank: the members would wait
        # for the others, which wait in torch's barrier after new_group.
        raise RuntimeError(
            f"distkit backend: new_group of {size} of the {tdist.get_world_size()} ranks on "
            f"\"distkit\" before distkit joined torch.distributed's job (initialized with "
            f"{tdist.get_backend()}): joining needs every rank, and torch makes the group on its "
            f"members only. Join first on every rank (distkit.dist.init_dist(...), or any "
            f"distkit.dist call on the default group), or make the group of every rank.")
    return _process_group(rank, size, _new_group(store, rank, size, None, timeout))


def _timeout_given(timeout) -> bool:
    """A timeout the caller gave (torch passes its default, 30 min, where
    none was given)."""
    return timeout is not None and timeout != tdist.distributed_c10d.default_pg_timeout


def _new_group(store, rank: int, size: int, members, timeout) -> _groups.ProcessGroup:
    """The distkit group of a torch group being made (this process is its
    `rank` of `size`): over `members` (default-group ranks; None: each
    member's tdist.get_rank(), learned through `store`), with `timeout` for
    its operations and its creation where one was given."""
    making = (store.add("distkit/makings", 1) - 1) // size
    keys = f"distkit/{making}/"

    def get(key: str) -> bytes:
        # A timeout given bounds the wait for the other members' keys too
        # (the store's own get waits for the store's timeout: torch's 30 min).
        if _timeout_given(timeout):
            try:
                store.wait([key], timeout)
            except RuntimeError as e:
                raise RuntimeError(
                    f"distkit backend: new_group of {size} ranks (this process its rank {rank}): "
                    f"not every member arrived within {timeout} ({key} missing: {e})") from e
        return store.get(key)

    if members is None:
        store.set(f"{keys}member/{rank}", str(tdist.get_rank()))
        members = [int(get(f"{keys}member/{r}")) for r in range(size)]
    if rank == 0:
        store.set(f"{keys}name", uuid.uuid4().hex)
    name = get(f"{keys}name").decode()
    ranks = (ctypes.c_int32 * size)(*members)
    # new_group(timeout=...) bounds the subgroup's operations and its
    # creation. Without one torch passes its default (30 min): the subgroup
    # then keeps the default group's, which init_process_group or init_dist
    # set (Gloo's would take torch's 30 min).
    options = GroupOptions()
    lib.dk_group_options_init(ctypes.byref(options))
    options.name = name.encode()
    if _timeout_given(timeout):
        options.timeout_ms = max(1, to_millis(timeout))
    handle = ctypes.c_void_p()
    raise_for_status(lib.dk_group_new_with_options, _groups.handle_of(None), ranks, size,
                     ctypes.byref(options), ctypes.byref(handle))
    return _groups.ProcessGroup(handle)


# True while distkit's own init_dist (or a rebase) initializes torch's
# default group over distkit's default group, whose timeout it passes.
_init_from_distkit = False

_registered = False


def register() -> None:
    """Registers the "distkit" backend with torch.distributed (once)."""
    global _registered
    if not _registered:
        _load_extension()
        if not hasattr(tdist.Backend, BACKEND.upper()):
            if "devices" in inspect.signature(tdist.Backend.register_backend).parameters:
                # torch 2.x: a Backend per device, which torch wraps in its
                # own ProcessGroup (bindings/python/c10d/torch_base.h).
                tdist.Backend.register_backend(BACKEND, _create, devices=["cpu", "cuda"])
            else:
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
    _init_default_group(_store_for_torch(prefix=_next_init_prefix()), timeout_ms)
    _groups.local_group_to_torch()
    return True


# init_default_group calls this process made (the n-th init's keys are under
# "torch/world<n>/").
_inits = 0


def _next_init_prefix() -> str:
    """The store prefix of this init round's torch keys. The job store
    outlives the world (distrun's outlives every dk_shutdown): a process that
    leaves and joins again must never read the previous round's keys (torch's
    store_based_barrier_key counts, which would hang new_group, and the
    subgroups' keys). Every rank makes the same sequence of init_dist calls,
    so they agree on n without a word, as the library's own "world<n>/"
    rendezvous prefix (cc/dist_api/dist.cc); counted even when the init
    fails, as the library counts. A replacement joined a grown world
    ("world@g<g>"): its keys are where the survivors' rebase_default_group
    put theirs."""
    global _inits
    _inits += 1
    name = _groups.get_default_group().name()
    return f"torch/world{_inits}/" if name == "world" else f"torch/{name}/"


def rebase_default_group(timeout_ms: int) -> None:
    """After shrink_group / grow_group replaced distkit's default group:
    torch.distributed's default group (init_dist made it on this backend)
    is made again over the new world, so torch's calls, and torch modules
    built afterwards, run on it. Its keys are new (under the new group's
    name), so nothing of the old one is read. Collective over the new
    world, as the shrink or grow was."""
    if tdist.is_initialized():
        tdist.destroy_process_group()
    _release_unused_groups()  # the old world's subgroups torch dropped
    _init_default_group(_store_for_torch(prefix=f"torch/{_groups.get_default_group().name()}/"),
                        timeout_ms)


def _init_default_group(store, timeout_ms: int) -> None:
    """torch.distributed's default group on this backend over distkit's
    default group, its keys in store."""
    # torch's init ends with a barrier in the store that counts every rank
    # in. distkit's world has every rank joined already (dk_init), and in a
    # job whose other ranks are C, C++, Rust or Go they would never count
    # in: the count is answered at once.
    global _init_from_distkit
    store._init_barrier_size = _groups.get_world_size()
    _init_from_distkit = True  # the timeout is the default group's own
    try:
        tdist.init_process_group(BACKEND, store=store, rank=_groups.get_rank(),
                                 world_size=_groups.get_world_size(),
                                 timeout=datetime.timedelta(milliseconds=timeout_ms))
    finally:
        store._init_barrier_size = None
        _init_from_distkit = False


register()
