"""A collective one rank refuses is refused on every rank, at once.

A bad argument found before a collective starts (an unknown op name, a
``src`` outside the group, a dtype or a non-contiguous tensor the library
refuses locally) used to raise on that rank alone, while its peers, already
inside the matching call, waited for it until the group's timeout. Now the
refusing rank takes part anyway: it leaves its reason in the job store, one
copy for each peer (``distkit/refused/<group>/<rank>/<peer>``), and makes a
barrier on the group, whose signature disagrees with the collective its peers called, so every peer's
call ends at once with the library's INVALID_ARGUMENT naming what each rank
called (the group stays usable, as after any disagreement); the peers add the
refusing rank's reason, read from the store, to that error, and delete
their copy (so that a later, unrelated disagreement with that rank is not
blamed on this refusal). The refusing rank raises its own error. Ranks that
all refuse meet in the barrier, delete the copies they left each other, and
each raises its own error.

The rank that refuses must not have started the collective: what counts is
any error raised before the library call (a ValueError or TypeError for an
argument, a PicklingError for an object) and the library's local checks (its
INVALID_ARGUMENT other than a disagreement); the library's other errors (a
peer failed, a timeout, an aborted group) reach every rank already. An error
raised after the library call returned (an object this rank cannot unpickle,
a copy back into the caller's tensors) is this rank's alone: its peers have
returned from the collective, so it is raised here without a barrier (one
would wait for them until the timeout, or pair with their next collective).
The calls into the library mark themselves (``call_collective``, ``issued``)
so that the decorator can tell which side of the call an error comes from."""
import contextlib
import ctypes
import functools
import re
import threading
from typing import Callable, Optional

from .. import errors
from .._lib import lib, raise_for_status
from . import groups

_KEY = "distkit/refused/{}/{}/{}"  # group, refusing rank, reader
_CALLED_BARRIER = re.compile(r"rank\(s\) ([0-9, ]+) called barrier #")


_issued = threading.local()


def _issued_count() -> int:
    return getattr(_issued, "count", 0)


def issued() -> None:
    """The library call of this thread's collective has been made (returned
    without an error, or started in its non-blocking form): errors from here
    on are this rank's alone."""
    _issued.count = _issued_count() + 1


def call_collective(fn, *args) -> None:
    """``raise_for_status(fn, *args)`` for a collective, marked ``issued``
    once the library returned."""
    raise_for_status(fn, *args)
    issued()


def _disagreement(error: BaseException) -> bool:
    return isinstance(error, errors.InvalidArgumentError) and "ranks disagree" in error.message


@contextlib.contextmanager
def _store():
    handle = ctypes.c_void_p()
    raise_for_status(lib.dk_default_store, ctypes.byref(handle))
    try:
        yield handle
    finally:
        lib.dk_store_destroy(handle)


def _group_name(group) -> str:
    twin = groups._twin(group)
    return (twin or groups._default_group).name()


def _tell_peers(name: str, group, error: BaseException) -> None:
    """This rank refused ``name`` on ``group``: its reason into the store
    (a copy for each peer, which that peer deletes once read), then the
    barrier that ends the peers' call. Errors here are not the caller's:
    the original error is what it gets."""
    if getattr(error, "_distkit_told", False):
        return
    try:
        error._distkit_told = True  # an outer collective built on this one
    except AttributeError:
        pass
    try:
        handle = groups.handle_of(group)
        size = groups.get_world_size(group)
        if size <= 1:
            return
        reason = f"{name}: {error}".encode()
        rank = groups.get_rank(group)
        gname = _group_name(group)
        with _store() as store:
            for peer in range(size):
                if peer != rank:
                    key = _KEY.format(gname, rank, peer).encode()
                    raise_for_status(lib.dk_store_set, store, key, reason, len(reason))
        try:
            raise_for_status(lib.dk_group_barrier, handle, None)
            others = [r for r in range(size) if r != rank]  # every rank refused
        except errors.InvalidArgumentError as e:
            # Other ranks that refused this call met this barrier: their
            # copies for this rank are not read as reasons.
            found = _CALLED_BARRIER.search(e.message) if _disagreement(e) else None
            others = [int(r) for r in found.group(1).split(",")] if found else []
        _take_reasons(gname, others, rank)
    except errors.DistkitError:
        pass  # the disagreement this barrier is for, or a group already failed


def _take_reasons(gname: str, ranks, reader: int) -> list:
    """The reasons ``ranks`` left for ``reader`` (deleted from the store):
    (rank, text) for each one present."""
    taken = []
    with _store() as store:
        for rank in ranks:
            if rank == reader:
                continue
            key = _KEY.format(gname, rank, reader).encode()
            keys = (ctypes.c_char_p * 1)(key)
            present = ctypes.c_int32()
            raise_for_status(lib.dk_store_check, store, keys, 1, ctypes.byref(present))
            if not present.value:
                continue
            out, size = ctypes.c_void_p(), ctypes.c_size_t()
            raise_for_status(lib.dk_store_get, store, key, ctypes.byref(out), ctypes.byref(size))
            try:
                text = ctypes.string_at(out, size.value).decode(errors="replace")
            finally:
                lib.dk_free(out)
            deleted = ctypes.c_int32()
            raise_for_status(lib.dk_store_delete_key, store, key, ctypes.byref(deleted))
            taken.append((rank, text))
    return taken


def _with_reasons(error: errors.InvalidArgumentError, group) -> errors.DistkitError:
    """A disagreement with ranks that called a barrier: their reasons, where
    they refused this collective, added to the error."""
    found = _CALLED_BARRIER.search(error.message)
    if not found:
        return error
    try:
        taken = _take_reasons(_group_name(group), [int(r) for r in found.group(1).split(",")],
                              groups.get_rank(group))
    except errors.DistkitError:
        return error
    if not taken:
        return error
    reasons = [f"rank {rank} refused its call before it started: {text}" for rank, text in taken]
    told = errors.error_for(error.code, f"{error.message}; " + "; ".join(reasons))
    told._distkit_told = True
    return told


def fail_together(group_of: Callable[[tuple, dict], Optional[object]]):
    """Decorates a collective whose group ``group_of(args, kwargs)`` gives:
    a refusal on this rank is told to the peers, and a disagreement with a
    rank that refused carries that rank's reason."""

    def decorate(fn):
        @functools.wraps(fn)
        def call(*args, **kwargs):
            try:
                group = group_of(args, kwargs)
            except Exception:  # noqa: BLE001 - the call itself reports its arguments
                group = None
            groups.check_member(group)  # before any argument: torch's groups give -1 sizes
            before = _issued_count()
            try:
                return fn(*args, **kwargs)
            except Exception as e:
                # The library's other errors (a peer failed, a timeout, an
                # aborted group) already reached every rank.
                if getattr(e, "_distkit_told", False) or (
                        isinstance(e, errors.DistkitError)
                        and not isinstance(e, errors.InvalidArgumentError)):
                    raise
                try:
                    group = group_of(args, kwargs)
                except Exception:  # the group itself is what is wrong: nobody to tell
                    raise e from None
                if _disagreement(e):
                    raise _with_reasons(e, group) from None
                if _issued_count() != before:
                    # After the library call: the peers are past it already.
                    raise
                _tell_peers(fn.__name__.lstrip("_"), group, e)
                raise
        return call
    return decorate


def group_at(position: int, seed_position: Optional[int] = None):
    """``group_of`` for a collective whose group is the keyword ``group`` or
    positional argument ``position`` (``seed_position`` in the seed's
    (torch's) form, chosen by a first argument that is a list, or a second
    that is a list or None for gather)."""

    def group_of(args, kwargs):
        if "group" in kwargs:
            return kwargs["group"]
        where = position
        if seed_position is not None and _seed_form(args, kwargs):
            where = seed_position
        return args[where] if len(args) > where else None
    return group_of


def _seed_form(args, kwargs) -> bool:
    if "tensor_list" in kwargs or "gather_list" in kwargs or "async_op" in kwargs:
        return True
    if args and isinstance(args[0], list):
        return True
    return len(args) > 1 and (args[1] is None or isinstance(args[1], list))
