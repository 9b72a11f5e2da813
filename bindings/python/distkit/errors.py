"""Maps the ABI's status codes (google.rpc numbering) to Python exceptions.

Every ABI error becomes a DistkitError carrying ``code`` (read from the ABI,
never parsed from the text) and ``message``. The subclasses also derive from
the built-in exception a Python user would expect, so ``except ValueError``
and ``except TimeoutError`` work.
"""

OK = 0
CANCELLED = 1
UNKNOWN = 2
INVALID_ARGUMENT = 3
DEADLINE_EXCEEDED = 4
NOT_FOUND = 5
ALREADY_EXISTS = 6
PERMISSION_DENIED = 7
RESOURCE_EXHAUSTED = 8
FAILED_PRECONDITION = 9
ABORTED = 10
OUT_OF_RANGE = 11
UNIMPLEMENTED = 12
INTERNAL = 13
UNAVAILABLE = 14
DATA_LOSS = 15
UNAUTHENTICATED = 16


class DistkitError(RuntimeError):
    """An error reported by libdistkit. ``code`` is the status code."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


class CancelledError(DistkitError):
    """The operation was cancelled (its group was aborted)."""


class InvalidArgumentError(DistkitError, ValueError):
    """Bad input: dtype, shape, op, rank, or a call that differs across ranks."""


class DeadlineExceededError(DistkitError, TimeoutError):
    """A timeout; the message names the operation and the ranks that never joined."""


class NotFoundError(DistkitError, LookupError):
    pass


class FailedPreconditionError(DistkitError):
    """Misuse, e.g. a call on an aborted group or a group this rank is not in."""


class UnimplementedError(DistkitError, NotImplementedError):
    pass


class UnavailableError(DistkitError, ConnectionError):
    """A peer or link failed; the group is poisoned (abort it and make a new one)."""


class UnauthenticatedError(DistkitError, PermissionError):
    """The job token was wrong or missing."""


_BY_CODE = {
    CANCELLED: CancelledError,
    INVALID_ARGUMENT: InvalidArgumentError,
    DEADLINE_EXCEEDED: DeadlineExceededError,
    NOT_FOUND: NotFoundError,
    FAILED_PRECONDITION: FailedPreconditionError,
    UNIMPLEMENTED: UnimplementedError,
    UNAVAILABLE: UnavailableError,
    UNAUTHENTICATED: UnauthenticatedError,
}


def error_for(code: int, message: str) -> DistkitError:
    """The exception for ``code``; unknown codes map to DistkitError itself."""
    return _BY_CODE.get(code, DistkitError)(code, message)
