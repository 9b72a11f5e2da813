#!/usr/bin/env python3
"""Fault injection: nothing hangs, every survivor ends within its bound.

Each run starts a job of C ranks (fault_rank.c: dk_init("pytorch"), then
all_reduces of 4 B and 256 KiB, checked), waits a random time (covering
init and mid-collective), and injects one fault into one rank:

  kill          SIGKILL a rank
  stop          SIGSTOP a rank (frozen, never resumed)
  zombie        SIGKILL a rank whose parent never reaps it
  kill_store    SIGKILL rank 0, which hosts the job's store
  stop_store    SIGSTOP rank 0 (the store host freezes)
  kill_launcher SIGKILL distrun (its ranks must die with it)

over the shared-memory path and Gloo's TCP (DISTKIT_SHM=0). The check: every
survivor exits, with the job's data complete (exit 0) or a clear error
(exit 3, its message printed), never a crash or a wrong sum, within the op
timeout + 5 s of the fault; with kill_launcher every rank is gone within 5 s.
Reports, per fault kind: runs, hangs, worst time from fault to the last
survivor's exit.

  fault_inject.py --rank BIN --distrun BIN [--runs 40] [--seed N]
"""

import argparse
import collections
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time

KINDS = ["kill", "stop", "zombie", "kill_store", "stop_store", "kill_launcher"]
PATHS = ["shm", "tcp"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Job:
    """The ranks of one run, started directly (rank 0 hosts the store) or
    under distrun; their pids as each prints them."""

    def __init__(self, args, world, path, kind, victim):
        self.world = world
        self.procs = []
        self.pids = {}  # rank -> pid of the rank's process
        self.output = collections.defaultdict(list)
        self.exit_times = {}
        self.lock = threading.Lock()
        env = dict(os.environ)
        env["FAULT_TIMEOUT_MS"] = str(int(args.timeout * 1000))
        env["FAULT_STEPS"] = str(args.steps)
        if path == "tcp":
            env["DISTKIT_SHM"] = "0"
        self.launcher = None
        if kind == "kill_launcher":
            self.launcher = subprocess.Popen(
                [args.distrun, "--nproc-per-node", str(world), "--master-port",
                 "0", "--", args.rank],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                start_new_session=True)
            threading.Thread(target=self._read_distrun, daemon=True).start()
            return
        port = free_port()
        for r in range(world):
            e = dict(env, RANK=str(r), WORLD_SIZE=str(world),
                     LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(world),
                     MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
            if kind == "zombie" and r == victim:
                e["FAULT_ZOMBIE"] = "1"  # only the victim's parent never reaps
            p = subprocess.Popen([args.rank], stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, env=e,
                                 start_new_session=True)
            self.procs.append(p)
            threading.Thread(target=self._read, args=(r, p),
                             daemon=True).start()

    def _read(self, r, p):
        for raw in p.stdout:
            line = raw.decode(errors="replace").rstrip()
            with self.lock:
                self.output[r].append(line)
                m = re.match(r"pid=(\d+)", line)
                if m:
                    self.pids[r] = int(m.group(1))
        p.wait()
        with self.lock:
            self.exit_times[r] = time.monotonic()

    def _read_distrun(self):
        for raw in self.launcher.stdout:
            line = raw.decode(errors="replace").rstrip()
            m = re.match(r"\[rank(\d+)\]: pid=(\d+)", line)
            with self.lock:
                self.output["distrun"].append(line)
                if m:
                    self.pids[int(m.group(1))] = int(m.group(2))

    def wait_for_pid(self, rank, limit):
        end = time.monotonic() + limit
        while time.monotonic() < end:
            with self.lock:
                if rank in self.pids:
                    return self.pids[rank]
            time.sleep(0.005)
        return None

    def kill_all(self):
        for pid in list(self.pids.values()):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for p in self.procs + ([self.launcher] if self.launcher else []):
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            p.wait()


def alive(pid):
    """True while `pid` runs (a zombie or a vanished pid is not running)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except (FileNotFoundError, IndexError, ProcessLookupError):
        return False


def one_run(args, rng, kind, path):
    world = rng.choice([3, 4])
    victim = 0 if kind in ("kill_store", "stop_store") else rng.randrange(world)
    delay = rng.uniform(0.0, args.max_delay)
    job = Job(args, world, path, kind, victim)
    start = time.monotonic()
    result = {"kind": kind, "path": path, "world": world, "victim": victim,
              "delay": round(delay, 3), "hang": False, "bad": []}
    try:
        if kind == "kill_launcher":
            for r in range(world):
                if job.wait_for_pid(r, 10) is None:
                    result["bad"].append(f"rank {r} never started")
                    return result
            time.sleep(max(0.0, start + delay - time.monotonic()))
            fault = time.monotonic()
            os.kill(job.launcher.pid, signal.SIGKILL)
            job.launcher.wait()
            bound = 5.0
            pids = list(job.pids.values())
            while any(alive(p) for p in pids) and \
                    time.monotonic() - fault < bound:
                time.sleep(0.01)
            took = time.monotonic() - fault
            result["took"] = round(took, 3)
            if any(alive(p) for p in pids):
                result["hang"] = True
                result["bad"].append("ranks outlived their killed launcher")
            return result

        pid = job.wait_for_pid(victim, 10)
        if pid is None:
            result["bad"].append(f"rank {victim} never printed its pid")
            return result
        time.sleep(max(0.0, start + delay - time.monotonic()))
        fault = time.monotonic()
        sig = signal.SIGSTOP if kind.startswith("stop") else signal.SIGKILL
        try:
            os.kill(pid, sig)
        except ProcessLookupError:  # it ended first: then it must have passed
            with job.lock:
                tail = " | ".join(job.output[victim][-3:])
            result["no_fault"] = True
            if "done" not in tail:
                result["bad"].append(f"rank {victim} ended before the fault: "
                                     f"{tail}")
            return result
        bound = args.timeout + 5.0
        survivors = [r for r in range(world) if r != victim]
        while time.monotonic() - fault < bound + 1:
            with job.lock:
                if all(r in job.exit_times for r in survivors):
                    break
            time.sleep(0.01)
        with job.lock:
            ended = {r: job.exit_times.get(r) for r in survivors}
        if any(t is None for t in ended.values()):
            result["hang"] = True
            late = [r for r, t in ended.items() if t is None]
            result["bad"].append(f"rank(s) {late} still running "
                                 f"{bound:.0f}s after the fault")
            with job.lock:
                for r in late:
                    result["bad"].append(
                        f"rank {r} said: " + " | ".join(job.output[r][-3:]))
            if args.stacks:
                for r in late:
                    pid = job.pids.get(r)
                    if pid:
                        st = subprocess.run(
                            ["gdb", "-p", str(pid), "-batch", "-ex",
                             "thread apply all bt 12"],
                            capture_output=True, text=True, timeout=60)
                        print(f"--- rank {r} (pid {pid}) stacks:\n{st.stdout}",
                              flush=True)
        else:
            took = max(ended.values()) - fault
            result["took"] = round(max(0.0, took), 3)
            if took > bound:
                result["bad"].append(f"last survivor ended after {took:.1f}s "
                                     f"(bound {bound:.0f}s)")
        for r in survivors:
            code = job.procs[r].poll()
            if code not in (0, 3, None):
                tail = " | ".join(job.output[r][-3:])
                result["bad"].append(f"rank {r} exit {code}: {tail}")
            if code == 3 and not any("failed" in l for l in job.output[r]):
                result["bad"].append(f"rank {r} failed without a message")
        return result
    finally:
        job.kill_all()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rank", required=True, help="fault_rank binary")
    ap.add_argument("--distrun", required=True, help="distrun binary")
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--timeout", type=float, default=3.0,
                    help="each collective's timeout, seconds")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--max-delay", type=float, default=1.0,
                    help="latest fault time after start, seconds")
    ap.add_argument("--kinds", default="",
                    help="comma-separated fault kinds (default: all)")
    ap.add_argument("--stacks", action="store_true",
                    help="print a hung rank's stacks (gdb)")
    args = ap.parse_args()
    kinds = args.kinds.split(",") if args.kinds else KINDS
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    print(f"fault injection: {args.runs} runs, seed {seed}, op timeout "
          f"{args.timeout}s", flush=True)
    stats = collections.defaultdict(lambda: {"runs": 0, "hangs": 0,
                                             "worst": 0.0, "bad": 0})
    failures = 0
    for i in range(args.runs):
        kind = kinds[i % len(kinds)]
        path = rng.choice(PATHS)
        res = one_run(args, rng, kind, path)
        s = stats[kind]
        s["runs"] += 1
        s["hangs"] += res["hang"]
        s["worst"] = max(s["worst"], res.get("took", 0.0))
        if res["bad"]:
            s["bad"] += 1
            failures += 1
            print(f"run {i}: FAILED {res}", flush=True)
        elif args.runs <= 60 or i % 20 == 0:
            print(f"run {i}: ok {res}", flush=True)
    print("\nkind            runs  hangs  bad  worst fault->last exit (s)")
    for kind in KINDS:
        s = stats[kind]
        if s["runs"]:
            print(f"{kind:<15} {s['runs']:>4}  {s['hangs']:>5}  {s['bad']:>3}  "
                  f"{s['worst']:.2f}")
    print(f"\n{failures} of {args.runs} runs failed (seed {seed})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
