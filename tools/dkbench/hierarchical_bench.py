#!/usr/bin/env python3
"""dkbench hierarchical: distkit across declared "hosts" beside flat Gloo TCP.

Runs collective_bench as two (or --hosts) distrun instances with --nnodes,
each declaring its own host (DISTKIT_HOST_ID), so each "host" reduces through
shared memory and only the leaders talk over TCP; and, alternated with it in
the same run, the same ranks as one flat Gloo TCP group (DISTKIT_SHM=0), the
path a group across hosts took before. Reports the median time per call of
--repeats fresh jobs and the ratio flat / hierarchical (> 1: hierarchical
faster).

  bazel run //tools/dkbench:hierarchical_bench -- --world-size 4 --hosts 2
"""

import argparse
import os
import secrets
import socket
import subprocess
import sys
from collections import defaultdict

from bench_common import distrun, tool


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse(text):
    rows = []
    for line in text.splitlines():
        parts = line.split("]: ", 1)[-1].strip().split(",")
        if len(parts) == 5 and parts[0] == "distkit":
            rows.append((parts[1], int(parts[3]), float(parts[4])))
    return rows


def hierarchical(n, hosts, bench_args, timeout):
    port, token = free_port(), secrets.token_hex(16)
    procs = []
    for node in range(hosts):
        env = dict(os.environ, DISTKIT_HOST_ID=f"bench-host-{node}", DISTKIT_TOKEN=token)
        cmd = [tool("..", "distrun", "distrun"), "--nnodes", str(hosts), "--node-rank", str(node),
               "--nproc-per-node", str(n // hosts), "--master-addr", "127.0.0.1",
               "--master-port", str(port), "--", tool("collective_bench")] + bench_args
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    outs = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        if p.returncode != 0:
            print(f"  hierarchical node failed ({p.returncode}):\n{err[-2000:]}", file=sys.stderr)
        outs.append(out)
    return parse(outs[0])  # rank 0 prints


def flat(n, bench_args, timeout):
    env = dict(os.environ, DISTKIT_SHM="0")
    cmd = distrun(n) + [tool("collective_bench")] + bench_args
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        print(f"  flat run failed ({out.returncode}):\n{out.stderr[-2000:]}", file=sys.stderr)
    return parse(out.stdout)


def human(nbytes):
    for unit in ("B", "KiB", "MiB"):
        if nbytes < 1024:
            return f"{nbytes:g}{unit}"
        nbytes /= 1024
    return f"{nbytes:g}GiB"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--world-size", type=int, default=4)
    p.add_argument("--hosts", type=int, default=2)
    p.add_argument("--ops", default="all_reduce,all_gather,reduce_scatter,broadcast")
    p.add_argument("--min-bytes", type=int, default=65536)
    p.add_argument("--max-bytes", type=int, default=16 << 20)
    p.add_argument("--batches", type=int, default=5)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--timeout", type=int, default=900)
    args = p.parse_args()
    if args.world_size % args.hosts:
        sys.exit("--world-size must be a multiple of --hosts")
    bench_args = ["--ops", args.ops, "--min-bytes", str(args.min_bytes),
                  "--max-bytes", str(args.max_bytes), "--batches", str(args.batches)]
    samples = defaultdict(list)  # (op, bytes, kind) -> [us]
    for repeat in range(args.repeats):
        print(f"run {repeat + 1}/{args.repeats}: hierarchical, then flat", file=sys.stderr, flush=True)
        for op, nbytes, us in hierarchical(args.world_size, args.hosts, bench_args, args.timeout):
            samples[(op, nbytes, "hier")].append(us)
        for op, nbytes, us in flat(args.world_size, bench_args, args.timeout):
            samples[(op, nbytes, "flat")].append(us)
    median = {k: sorted(v)[len(v) // 2] for k, v in samples.items()}
    print(f"{args.hosts} hosts x {args.world_size // args.hosts} ranks; median of {args.repeats} jobs")
    header = f"{'op':<15}{'size':>9} | {'hierarchical us':>16} | {'flat TCP us':>12} | {'ratio':>6}"
    print(header)
    print("-" * len(header))
    for op, nbytes in sorted({(k[0], k[1]) for k in median}):
        h, f = median.get((op, nbytes, "hier")), median.get((op, nbytes, "flat"))
        ratio = f"{f / h:>6.2f}" if h and f else f"{'n/a':>6}"
        hs = f"{h:>16.1f}" if h else f"{'n/a':>16}"
        fs = f"{f:>12.1f}" if f else f"{'n/a':>12}"
        print(f"{op:<15}{human(nbytes):>9} | {hs} | {fs} | {ratio}")
    print("ratio = flat TCP time / hierarchical time (> 1: hierarchical faster)")


if __name__ == "__main__":
    main()
