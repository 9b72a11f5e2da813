"""A Python rank for the harness self-test (same protocol as the C probe)."""
import os
import sys
import time


def main() -> int:
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    directory = os.environ["TEST_TMPDIR"]
    open(os.path.join(directory, f"py_rank_{rank}"), "w").close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        present = sum(
            os.path.exists(os.path.join(directory, f"py_rank_{r}")) for r in range(world))
        if present == world:
            print(f"python rank {rank} of {world} saw all {world} ranks")
            return 0
        time.sleep(0.05)
    print(f"python rank {rank}: timed out waiting for the other ranks", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
