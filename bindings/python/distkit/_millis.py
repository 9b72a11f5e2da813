"""The one conversion of a caller's duration to the C ABI's ``*_ms`` values.

In the C ABI a timeout of 0 often means "the default" (dk_group_options_t:
the parent's; dk_init_config_t's connect_timeout_ms: timeout_ms) and < 0
another default (dk_store_wait: the store's; dk_work_wait: no limit). A
positive timeout under a millisecond truncated to 0 would then ask for the
opposite of what the caller meant: it becomes 1 ms instead. Zero stays 0 and
a negative value stays negative (at most -1), so each API keeps its meaning
of them."""
import datetime

_INT64_MAX = 2**63 - 1


def to_millis(timeout, none: int = -1) -> int:
    """``timeout`` (seconds, or a ``datetime.timedelta``) in whole
    milliseconds for the ABI: ``none`` for None; a positive value at least
    1 (under a millisecond: 1, never 0); 0 for zero; a negative value at
    most -1."""
    if timeout is None:
        return none
    seconds = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else float(timeout)
    if seconds > 0:
        return min(_INT64_MAX, max(1, int(seconds * 1000)))
    if seconds < 0:
        return max(-_INT64_MAX, min(-1, int(seconds * 1000)))
    return 0
