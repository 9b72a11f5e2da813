"""Work handles for ``async_op=True``: torch's Work interface over the ABI's
dk_work_t. The tensors an operation reads or writes are lent to the library
until the work is waited for (or dropped, which waits too, so no buffer is
freed under a running collective)."""
import ctypes
import datetime
from typing import Callable, Optional, Sequence

from .. import _lib, errors
from .._lib import lib, raise_for_status
from .._millis import to_millis


class Work:
    """What an asynchronous collective returns: ``wait()`` blocks until it
    is done (re-raising its error) and finishes it (copies results where
    the call form needs it); ``is_completed()`` polls."""

    def __init__(self, handle: Optional[ctypes.c_void_p], keep: Sequence = (),
                 then: Optional[Callable[[], None]] = None):
        # handle None: done already (world size 1, or nothing to send).
        self._handle = handle if handle is not None and handle.value else None
        self._keep = list(keep)
        self._then = then
        self._finished = False
        self._error: Optional[Exception] = None

    def is_completed(self) -> bool:
        if self._finished or self._handle is None:
            return True
        state = ctypes.c_int32()
        raise_for_status(lib.dk_work_test, self._handle, ctypes.byref(state))
        if state.value == _lib.WORK_PENDING:
            return False
        # Done: finished here as wait() would (results copied back where the
        # call form needs it), since torch's tensors hold their results once
        # the work is complete; a failure stays for wait() and exception().
        try:
            self.wait()
        except Exception:  # noqa: BLE001 - kept in self._error
            pass
        return True

    def wait(self, timeout: Optional[datetime.timedelta] = None) -> bool:
        """Blocks until done (``timeout``: a timedelta or seconds; past it a
        TimeoutError, and the work goes on)."""
        if self._finished:
            if self._error is not None:
                raise self._error
            return True
        if self._handle is not None:
            ms = to_millis(timeout)  # None: -1, no limit
            error = None
            try:
                raise_for_status(lib.dk_work_wait, self._handle, ms)
            except TimeoutError:
                # DEADLINE_EXCEEDED is also the work's own failure (a peer
                # never joined within the group's timeout): once the work is
                # done, its own status (it may have finished just now) counts.
                if self._pending():
                    raise  # still running: the buffers stay lent
                try:
                    raise_for_status(lib.dk_work_wait, self._handle, 0)
                except Exception as own:  # noqa: BLE001 - kept for exception()
                    error = own
            except Exception as e:  # noqa: BLE001 - kept for exception()
                error = e
            if error is not None:
                self._error = error
                self._release()
                raise error
        self._release()
        if self._then is not None:
            try:
                self._then()
            except Exception as e:  # noqa: BLE001 - the results never reached the caller
                self._error = e
                raise
        return True

    def _pending(self) -> bool:
        state = ctypes.c_int32()
        try:
            raise_for_status(lib.dk_work_test, self._handle, ctypes.byref(state))
        except Exception:  # noqa: BLE001 - a work that cannot be asked is not running
            return False
        return state.value == _lib.WORK_PENDING

    def is_success(self) -> bool:
        return self._finished and self._error is None

    def exception(self) -> Optional[Exception]:
        return self._error

    def _release(self) -> None:
        self._finished = True
        if self._handle is not None:
            lib.dk_work_destroy(self._handle)
            self._handle = None
        self._keep = []

    def __del__(self):
        if getattr(self, "_handle", None) is not None:
            # The buffers are still lent: wait, then finish as wait() would,
            # so a dropped Work's results still reach the caller's tensors.
            ok = lib.dk_work_wait(self._handle, -1, None) == errors.OK
            self._release()
            if ok and self._then is not None:
                try:
                    self._then()
                except Exception:  # noqa: BLE001 - nothing to raise to in __del__
                    pass


def start(fn, *args) -> ctypes.c_void_p:
    """Calls an ABI collective in its non-blocking form; the work handle."""
    handle = ctypes.c_void_p()
    raise_for_status(fn, *args, ctypes.byref(handle))
    return handle
