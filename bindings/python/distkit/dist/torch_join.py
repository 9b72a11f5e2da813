"""distkit.dist in a job whose ranks initialized torch.distributed themselves
(``torch.distributed.init_process_group('gloo', rank=r, world_size=n)``, as
many training scripts and mmengine's own tests of mmengine.dist do).

mmengine.dist answers for torch's default group, so distkit.dist does too:
its local queries (is_distributed, get_rank, get_world_size, get_backend)
read torch's answers, and the first call that needs distkit's own group (a
collective, an object collective, new_group, init_local_group, ...) joins
the job: collective over torch's ranks, through torch's default store. Rank
0 serves a distkit store (on loopback when every rank is on its host) and
publishes its addresses (MASTER_ADDR when set, its interfaces' addresses,
its hostname last) and a fresh token in torch's store; the others connect
to the first that answers, and every rank joins with torch's rank and world
size."""
import ctypes
import os
import secrets
import socket
import sys
import threading
from typing import List, Optional

from .. import _lib
from .._lib import lib, raise_for_status

_lock = threading.Lock()
_store: Optional[ctypes.c_void_p] = None  # distkit's store: outlives the group


def torch_default_group_initialized() -> bool:
    """Whether user code initialized torch.distributed (never imports torch)."""
    tdist = sys.modules.get("torch.distributed")
    return bool(tdist is not None and tdist.is_available() and tdist.is_initialized())


def torch_rank_and_size():
    import torch.distributed as tdist
    return tdist.get_rank(), tdist.get_world_size()


def torch_backend() -> str:
    import torch.distributed as tdist
    return str(tdist.get_backend())


def join(store=None, rank: Optional[int] = None, size: Optional[int] = None,
         timeout_ms: int = 300_000,
         op_timeout_ms: Optional[int] = None) -> Optional[ctypes.c_void_p]:
    """Collective over torch's default group: distkit's world handle (a
    dk_group_t*), built over the same ranks, through torch's default store.
    None when torch.distributed is not initialized either. With ``store``,
    ``rank`` and ``size`` (a torch Store: distkit's backend creating torch's
    default group), through that store instead. ``op_timeout_ms``: each
    collective's bound (torch's init_process_group timeout), else distkit's
    default."""
    global _store
    with _lock:
        if store is None:
            if not torch_default_group_initialized():
                return None
            import torch.distributed as tdist
            from torch.distributed.distributed_c10d import _get_default_store
            rank, size = tdist.get_rank(), tdist.get_world_size()
            torch_store = _get_default_store()
            backend = torch_backend()
        else:
            torch_store, backend = store, "gloo"
        # One generation per join, so a job that joins again (after
        # destroy) does not read the last one's keys.
        generation = (torch_store.add("distkit/join/count", 1) - 1) // size
        prefix = f"distkit/join/{generation}"
        torch_store.set(f"{prefix}/host/{rank}", socket.gethostname())
        config = _lib.StoreConfig()
        lib.dk_store_config_init(ctypes.byref(config))
        config.timeout_ms = config.connect_timeout_ms = timeout_ms
        store = ctypes.c_void_p()
        if rank == 0:
            hosts = {torch_store.get(f"{prefix}/host/{r}").decode() for r in range(size)}
            one_host = hosts == {socket.gethostname()}
            token = secrets.token_hex(16)
            config.address = b"127.0.0.1:0" if one_host else b"0.0.0.0:0"
            config.token = token.encode()
            raise_for_status(lib.dk_store_serve, ctypes.byref(config), ctypes.byref(store))
            port = lib.dk_store_address(store).decode().rsplit(":", 1)[1]
            hosts = ["127.0.0.1"] if one_host else _reachable_hosts()
            torch_store.set(f"{prefix}/token", token)
            torch_store.set(f"{prefix}/address", ",".join(f"{h}:{port}" for h in hosts))
        else:
            candidates = torch_store.get(f"{prefix}/address").decode().split(",")
            config.token = torch_store.get(f"{prefix}/token")
            store = _connect_first(config, candidates, timeout_ms)
        init = _lib.InitConfig()
        lib.dk_init_config_init(ctypes.byref(init))
        init.backend = (backend if backend in ("gloo", "nccl", "mpi") else "gloo").encode()
        if op_timeout_ms is not None:
            init.timeout_ms = op_timeout_ms
        world = ctypes.c_void_p()
        try:
            raise_for_status(lib.dk_init_with_store, store, rank, size, ctypes.byref(init),
                             ctypes.byref(world))
        except Exception:
            lib.dk_store_destroy(store)
            raise
        _store = store
        return world


def _reachable_hosts() -> List[str]:
    """Where other hosts may reach rank 0, in the order they try them:
    torch's MASTER_ADDR when set, this host's IPv4 addresses (no DNS or
    /etc/hosts needed: a hostname often does not resolve to the interface
    the job uses), the hostname last."""
    hosts = [os.environ["MASTER_ADDR"]] if os.environ.get("MASTER_ADDR") else []
    hosts += [a for a in _ipv4_addresses() if a not in hosts]
    return hosts + [socket.gethostname()]


def _ipv4_addresses() -> List[str]:
    """This host's IPv4 interface addresses, loopback left out (Linux)."""
    import fcntl
    import struct
    siocgifaddr = 0x8915
    found = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            try:
                reply = fcntl.ioctl(s.fileno(), siocgifaddr,
                                    struct.pack("256s", name[:15].encode()))
            except OSError:  # no IPv4 address, or down
                continue
            address = socket.inet_ntoa(reply[20:24])
            if not address.startswith("127."):
                found.append(address)
    return found


def _connect_first(config, candidates: List[str], timeout_ms: int) -> ctypes.c_void_p:
    """distkit's store at the first of rank 0's `candidates` that answers
    (and knows the token): each but the last gets a few seconds, so an
    address of an interface this host cannot reach costs little."""
    errors = []
    for i, address in enumerate(candidates):
        last = i == len(candidates) - 1
        config.address = address.encode()
        config.connect_timeout_ms = timeout_ms if last else min(timeout_ms, 3000)
        store = ctypes.c_void_p()
        try:
            raise_for_status(lib.dk_store_connect, ctypes.byref(config), ctypes.byref(store))
            return store
        except Exception as e:  # noqa: BLE001 - the next candidate; all named if none
            errors.append(f"{address}: {e}")
    raise RuntimeError("distkit: could not reach rank 0's store at any of its addresses: " +
                       "; ".join(errors))


def release() -> None:
    """After dk_shutdown: closes the store (and rank 0's server)."""
    global _store
    with _lock:
        if _store is not None:
            lib.dk_store_destroy(_store)
            _store = None
