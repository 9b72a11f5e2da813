#!/usr/bin/env python3
"""Start-up at scale, beside torch: the time from starting N rank processes
on this host to the end of the job's first all_reduce (the last rank's),
for distkit (startup_rank.c: dk_init + all_reduce; rank 0 hosts the store)
and for LibTorch C++ (startup_torch_rank.cc: TCPStore + ProcessGroupGloo),
started the same way, alternated, medians of --repeats fresh jobs. Also
reports how distkit's time grows with N (against the smallest N).

  bazel run //tools/dkbench:startup_bench -- --ranks 16,64,128,256,512
"""

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# distkit's phases of the last job run, seconds from the first spawn to the
# last rank's: spawned (the launcher's last spawn), main (its main() began),
# init (dk_init returned), all_reduce (its first all_reduce ended).
last_phases = {}


def one_job(binary, n, limit, hosts=1):
    """Seconds from the first spawn to the last rank's first all_reduce, or
    the failure text."""
    port = free_port()
    # Each rank writes to a file of its own, closed in the launcher at once:
    # a launcher holding N pipes makes every later spawn slower (the child
    # closes the descriptors it inherits), which would charge the launcher's
    # own growth to the ranks.
    outdir = tempfile.mkdtemp(prefix="startup_bench.")
    start_ns = time.time_ns()
    procs = []
    for r in range(n):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(n),
                   LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(n),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        if hosts > 1:
            # Consecutive ranks declare the same "host" (distkit's
            # DISTKIT_HOST_ID): shared memory inside each, leaders across.
            env["DISTKIT_HOST_ID"] = f"bench-host-{r * hosts // n}"
            env["LOCAL_RANK"] = str(r % (n // hosts))
            env["LOCAL_WORLD_SIZE"] = str(n // hosts)
        with open(os.path.join(outdir, str(r)), "wb") as out:
            procs.append(subprocess.Popen([binary], stdout=out,
                                          stderr=subprocess.STDOUT, env=env))
    spawned_ns = time.time_ns()
    ends, failure = [], None
    marks = {"main": [], "init": []}
    connections = []
    deadline = time.monotonic() + limit
    for r, p in enumerate(procs):
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            failure = failure or f"still running after {limit:.0f} s"
            continue
        with open(os.path.join(outdir, str(r)), "rb") as f:
            text = f.read().decode(errors="replace")
        if p.returncode != 0:
            failure = failure or f"exit {p.returncode}: {text.strip()[-160:]}"
            continue
        for line in text.splitlines():
            if line.startswith("first_all_reduce_end_ns="):
                ends.append(int(line.split("=")[1]))
            elif line.startswith("main_ns="):
                marks["main"].append(int(line.split("=")[1]))
            elif line.startswith("init_end_ns="):
                marks["init"].append(int(line.split("=")[1]))
            elif line.startswith("peer_connections="):
                connections.append(int(line.split("=")[1]))
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    shutil.rmtree(outdir, ignore_errors=True)
    if failure or len(ends) != n:
        return failure or "a rank printed no time"
    last_phases.clear()
    last_phases["spawned"] = (spawned_ns - start_ns) / 1e9
    for k, v in marks.items():
        if v:
            last_phases[k] = (max(v) - start_ns) / 1e9
    last_phases["all_reduce"] = (max(ends) - start_ns) / 1e9
    if connections:
        last_phases["max_rank_tcp_connections"] = max(connections)
    return (max(ends) - start_ns) / 1e9


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--distkit", required=True, help="startup_rank binary")
    ap.add_argument("--torch", default="", help="startup_torch_rank binary")
    ap.add_argument("--ranks", default="2,16,64,128,256")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--limit", type=float, default=300.0,
                    help="seconds a job may take")
    ap.add_argument("--hosts", type=int, default=1,
                    help="ranks declare this many \"hosts\" of consecutive "
                         "ranks (DISTKIT_HOST_ID): the path across hosts")
    ap.add_argument("--phases", action="store_true",
                    help="also print where distkit's time went in each job")
    args = ap.parse_args()
    sizes = [int(x) for x in args.ranks.split(",")]
    impls = [("distkit", args.distkit)] + (
        [("torch", args.torch)] if args.torch else [])
    print(f"start-up: {len(impls)} implementation(s), ranks {sizes}, "
          f"{args.hosts} host(s), {args.repeats} jobs each (alternated), "
          f"{os.cpu_count()} cores", flush=True)
    print(f"{'N':>5} | {'distkit s':>10} | {'torch s':>10} | {'ratio':>6} | "
          f"{'distkit growth':>14}")
    base = None
    for n in sizes:
        times = {name: [] for name, _ in impls}
        failed = {}
        for _ in range(args.repeats):
            for name, binary in impls:
                if name in failed:
                    continue
                t = one_job(binary, n, args.limit, args.hosts)
                if isinstance(t, str):
                    failed[name] = t
                else:
                    times[name].append(t)
                    if args.phases and name == "distkit" and last_phases:
                        print("      phases (s from the first spawn, last "
                              "rank): " + ", ".join(
                                  f"{k} {v:.3f}" if isinstance(v, float)
                                  else f"{k} {v}"
                                  for k, v in last_phases.items()),
                              flush=True)
        med = {k: statistics.median(v) for k, v in times.items() if v}
        d = med.get("distkit")
        if base is None and d is not None:
            base = (n, d)
        cells = []
        for name in ("distkit", "torch"):
            if name in med:
                cells.append(f"{med[name]:>10.3f}")
            elif name in failed:
                cells.append(f"{'failed':>10}")
            else:
                cells.append(f"{'-':>10}")
        ratio = (f"{med['torch'] / d:>6.2f}"
                 if d is not None and "torch" in med else f"{'-':>6}")
        growth = (f"{d / base[1]:>8.2f}x/{n / base[0]:.0f}x"
                  if d is not None and base is not None else "-")
        print(f"{n:>5} | {cells[0]} | {cells[1]} | {ratio} | {growth:>14}",
              flush=True)
        for name, why in failed.items():
            print(f"      {name} at N={n}: {why}", flush=True)
    print("ratio = torch / distkit (> 1: distkit starts faster); growth = "
          "distkit time / its time at the smallest N, beside N's own factor")
    return 0


if __name__ == "__main__":
    sys.exit(main())
