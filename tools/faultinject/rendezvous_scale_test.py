#!/usr/bin/env python3
"""Rendezvous at scale, bounded: N ranks (default 64) on this host, started
directly (rank 0 hosts the store), each dk_init + one all_reduce (checked),
must all finish; what the store served per rank (connections, requests:
DISTKIT_STORE_STATS: connections, requests and the keys they named) must be
what a 4-rank job's ranks need, so a start-up step that grows with N per
rank (an O(N^2) job: every rank reading every rank's key, in N requests or
one) fails here, not only in a benchmark; then the same job with one rank that dies before it joins must
end every other rank with a clear init error within the init timeout + 5 s,
not a hang.

  rendezvous_scale_test.py --rank FAULT_RANK_BINARY [--ranks 64]
"""

import argparse
import os
import socket
import subprocess
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_job(rank_bin, n, timeout_ms, dead=None, limit=120.0, stats=None):
    """Starts the job; returns (seconds from the go file until the last rank
    ended, {rank: (exit code, output)}); ranks still running at `limit` are
    killed. The ranks wait for the go file before dk_init (FAULT_GO_FILE),
    which appears once every rank has printed its pid (or ended), so that
    each rank's init bound starts after the moment the test times from:
    spawning 64 processes on a loaded machine takes seconds, and a rank
    whose dk_init began that much after the last spawn outlived a bound
    timed from it.
    `stats`: a file where the store's host writes what it served."""
    port = free_port()
    tmp = os.environ.get("TEST_TMPDIR", "/tmp")
    job = f"{os.getpid()}.{n}.{dead}"
    go = os.path.join(tmp, f"go.{job}")
    if os.path.exists(go):
        os.remove(go)
    procs, outs = [], []
    start = time.monotonic()
    for r in range(n):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(n),
                   LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(n),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   FAULT_STEPS="1", FAULT_TIMEOUT_MS=str(timeout_ms),
                   FAULT_GO_FILE=go)
        if dead is not None:
            env["FAULT_EXIT_RANK"] = str(dead)
        if stats is not None:
            env["DISTKIT_STORE_STATS"] = stats
        outs.append(os.path.join(tmp, f"rank.{job}.{r}.out"))
        with open(outs[-1], "wb") as out:
            procs.append(subprocess.Popen([rank_bin], stdout=out,
                                          stderr=subprocess.STDOUT, env=env))

    def started(r):
        # fault_rank's first line, before it waits for the go file.
        with open(outs[r], "rb") as f:
            return b"pid=" in f.read() or procs[r].poll() is not None

    waiting = set(range(n))
    while waiting and time.monotonic() < start + limit:
        waiting = {r for r in waiting if not started(r)}
        time.sleep(0.01)
    open(go, "w").close()
    go_at = time.monotonic()
    results = {}
    for r, p in enumerate(procs):
        try:
            code = p.wait(timeout=max(0.1, go_at + limit - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            code = None
        with open(outs[r], "rb") as f:
            results[r] = (code, f.read().decode(errors="replace"))
    took = time.monotonic() - go_at
    for path in outs + [go]:
        os.remove(path)
    return took, results


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rank", required=True)
    ap.add_argument("--ranks", type=int, default=64)
    args = ap.parse_args()
    n, failures = args.ranks, 0

    served = {}
    for size in (4, n):
        stats = os.path.join(os.environ.get("TEST_TMPDIR", "/tmp"),
                             f"store_stats.{os.getpid()}.{size}")
        if os.path.exists(stats):
            os.remove(stats)
        took, results = run_job(args.rank, size, timeout_ms=60000, stats=stats)
        bad = {r: res for r, res in results.items() if res[0] != 0}
        print(f"{size} ranks: init + all_reduce done {took:.2f} s after the go file, "
              f"{size - len(bad)} of {size} done", flush=True)
        for r, (code, out) in sorted(bad.items())[:5]:
            print(f"FAIL: rank {r} exit {code}: {out.strip()[-300:]}")
            failures += 1
        line = open(stats).read().strip() if os.path.exists(stats) else ""
        counts = dict(f.split("=") for f in line.split()[2:]) if line else {}
        if set(counts) != {"connections", "requests", "keys"}:
            print(f"FAIL: the store's host wrote no stats for {size} ranks: "
                  f"'{line}'")
            failures += 1
            continue
        served[size] = {k: int(v) / size for k, v in counts.items()}
        print(f"{size} ranks: the store served {served[size]['connections']:.2f} "
              f"connections, {served[size]['requests']:.2f} requests and "
              f"{served[size]['keys']:.2f} keys per rank", flush=True)
    if len(served) == 2:
        # Per rank, start-up needs what a small job's ranks need: a step
        # whose per-rank cost grows with N (every rank reading every other
        # rank's key, say) would multiply these by N / 4.
        few, many = served[4], served[n]
        if many["connections"] > few["connections"] + 0.5:
            print(f"FAIL: store connections per rank grew with the job: "
                  f"{few['connections']:.2f} at 4 ranks, "
                  f"{many['connections']:.2f} at {n}")
            failures += 1
        if many["requests"] > 1.5 * few["requests"] + 2:
            print(f"FAIL: store requests per rank grew with the job: "
                  f"{few['requests']:.2f} at 4 ranks, {many['requests']:.2f} "
                  f"at {n}")
            failures += 1
        # A multi_get of every rank's key by every rank is one request a
        # rank but N keys: the store's one thread looks up N^2 of them.
        if many["keys"] > 1.5 * few["keys"] + 2:
            print(f"FAIL: keys named per rank grew with the job: "
                  f"{few['keys']:.2f} at 4 ranks, {many['keys']:.2f} at {n}")
            failures += 1

    timeout_s = 5.0
    dead = n // 2 + 1
    took, results = run_job(args.rank, n, timeout_ms=int(timeout_s * 1000),
                            dead=dead, limit=timeout_s + 30)
    print(f"{n} ranks, rank {dead} dead before joining: every rank ended "
          f"{took:.2f} s after the go file (bound {timeout_s + 5:.0f} s)", flush=True)
    if took > timeout_s + 5:
        print(f"FAIL: took {took:.1f} s")
        failures += 1
    for r, (code, out) in sorted(results.items()):
        if r == dead:
            continue
        if code != 3 or "init failed" not in out:
            print(f"FAIL: rank {r} exit {code}: {out.strip()[-300:]}")
            failures += 1
            break
    sample = results[0][1].strip().splitlines()[-1] if results[0][1] else ""
    print(f"rank 0 said: {sample}")
    print("PASS" if not failures else f"{failures} check(s) failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
