"""How a scripted Python multi-rank program reports, as testing/cc/rank_check.h
does for C++ ones: a failed check prints "rank R: CHECK FAILED: what" on
stderr and is counted, so one run shows every failure; finish() prints one
summary line and gives the exit status. R is the launcher's RANK (the job's
rank: the same on every launcher, before and after joining). The harness
prefixes each line with the rank that wrote it too, and fails the test on any
nonzero status.

    from testing.python.rank_check import check, finish

    check(got == want, f"all_reduce: {got}")
    ...
    return finish("collective checks")   # "rank R: collective checks passed"
"""
import os
import sys

_failures = 0


def _rank() -> str:
    return os.environ.get("RANK", "?")


def check(ok, what: str) -> None:
    """Reports and counts a failure when `ok` is false; the program goes on."""
    global _failures
    if not ok:
        _failures += 1
        print(f"rank {_rank()}: CHECK FAILED: {what}", file=sys.stderr, flush=True)


def failures() -> int:
    """How many checks have failed in this process so far."""
    return _failures


def finish(summary: str) -> int:
    """Prints "rank R: <summary> passed", or "rank R: <summary>: N checks
    FAILED"; returns the exit status (0 when no check failed)."""
    if _failures == 0:
        print(f"rank {_rank()}: {summary} passed", flush=True)
        return 0
    print(f"rank {_rank()}: {summary}: {_failures} checks FAILED", flush=True)
    return 1
