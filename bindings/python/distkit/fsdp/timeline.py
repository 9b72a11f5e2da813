"""What a sharded model did when: the events of take_timeline() and how far
its all-gathers overlapped compute."""
import collections
from typing import List

from .. import _lib


class TimelineEvent(collections.namedtuple("TimelineEvent", "unit kind unix_ns")):
    """One entry of FullyShardedDataParallel.take_timeline(): unit index
    (wrapping order), what happened, and when (ns since the Unix epoch, as
    time.time_ns()). Kinds: from the library "unshard_start",
    "unshard_done" (a gather started, and waited for), "reshard",
    "reduce_start", "reduce_done"; from the wrapper "forward_start",
    "forward_end", "backward_start", "backward_end" (the unit's compute)."""


# The library's dk_shard_event_t kinds, by the names TimelineEvent gives them.
EVENT_KINDS = {_lib.SHARD_EVENT_UNSHARD_START: "unshard_start",
               _lib.SHARD_EVENT_UNSHARD_DONE: "unshard_done",
               _lib.SHARD_EVENT_RESHARD: "reshard",
               _lib.SHARD_EVENT_REDUCE_START: "reduce_start",
               _lib.SHARD_EVENT_REDUCE_DONE: "reduce_done"}


def prefetch_overlap(timeline: List[TimelineEvent]) -> dict:
    """How far all-gathers ran beside compute in `timeline`: "gathers"
    counted (started and waited for), "overlapped" those during which
    another unit's compute started or ended (a prefetched gather; a blocking
    one has none), and "overlap_ns" the sum, over those, of the time from
    the gather's start to the last such compute mark inside it."""
    gathers, marks, started = [], [], {}
    for e in timeline:
        if e.kind == "unshard_start":
            started[e.unit] = e.unix_ns
        elif e.kind == "unshard_done" and e.unit in started:
            gathers.append((e.unit, started.pop(e.unit), e.unix_ns))
        elif e.kind.startswith(("forward_", "backward_")):
            marks.append((e.unit, e.unix_ns))
    overlapped, total = 0, 0
    for unit, start, end in gathers:
        inside = [ns for u, ns in marks if u != unit and start <= ns <= end]
        if inside:
            overlapped += 1
            total += max(inside) - start
    return {"gathers": len(gathers), "overlapped": overlapped, "overlap_ns": total}
