"""Bytes of sharded model state, for benchmarks: what sharding saves is
visible here. The gathered full parameters live in torch storage; the
shards, their gradients and the gather buffers in the library
(dk_shard_held_bytes)."""
import weakref

from .._lib import lib

# Bytes of gathered full parameters alive now and at most.
_full_bytes = {"now": 0, "peak": 0}

# Every unit alive, and the most model state held at once (library + torch).
_live_units = weakref.WeakSet()
_held = {"peak": 0}


def track_unit(unit) -> None:
    """Counts `unit`'s library memory in held_peak while the unit lives."""
    _live_units.add(unit)


def add_full_bytes(delta: int) -> None:
    """Full parameters gathered (delta > 0) or freed (delta < 0)."""
    _full_bytes["now"] += delta
    _full_bytes["peak"] = max(_full_bytes["peak"], _full_bytes["now"])


def sample_held() -> None:
    """Records the model state held right now (library + torch storage)."""
    now = _full_bytes["now"] + sum(lib.dk_shard_held_bytes(u.handle) for u in list(_live_units)
                                   if u.handle)
    _held["peak"] = max(_held["peak"], now)


def memory_stats() -> dict:
    """Bytes of sharded model state, now and at most since the last
    reset_peak_memory_stats(): "full_now" / "full_peak", the gathered full
    parameters in torch storage; "held_peak", those plus what the library
    holds for every unit (shards, shard gradients, full gradients, gather
    buffers) at the same moment."""
    return {"full_now": _full_bytes["now"], "full_peak": _full_bytes["peak"],
            "held_peak": _held["peak"]}


def reset_peak_memory_stats() -> None:
    _full_bytes["peak"] = _full_bytes["now"]
    _held["peak"] = 0
    sample_held()
