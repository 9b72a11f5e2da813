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

over the shared-memory path, Gloo's TCP (DISTKIT_SHM=0) and the MPI backend
under mpirun (kill, stop, kill_launcher: it has no store, and mpirun ends a
job whose rank died). The check: every survivor exits, with the job's data
complete (exit 0) or a clear error (exit 3, its message printed), never a
crash or a wrong sum, within the op timeout + 5 s of the fault (under
mpirun, a survivor that mpirun itself stops because a rank died also
counts); with kill_launcher every rank is gone within 5 s.
Reports, per fault kind: runs, hangs, worst time from fault to the last
survivor's exit.

Start-up kills (--startup-runs N, run after the others): one rank of a
job of 3-4 is SIGKILLed at a random moment of its start-up (0 to
--startup-window s after launch), under distrun and with the ranks started
directly (plain torchrun-style variables, rank 0 hosting the store; the
victim is then not rank 0), over shared memory and TCP. Every survivor must
end by itself with an error (its message printed, naming the dead rank)
within --startup-bound s (1) of the kill, although init's timeout is 10 s;
and /dev/shm must hold no distkit segment of the job afterwards. Reports the
kill-to-last-error latencies.

  fault_inject.py --rank BIN --distrun BIN [--runs 40] [--seed N]
      [--startup-runs N] [--startup-window S] [--startup-bound S]
"""

import argparse
import collections
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

KINDS = ["kill", "stop", "zombie", "kill_store", "stop_store", "kill_launcher"]
# The fault kinds each path can take.
PATHS = {
    "shm": KINDS,
    "tcp": KINDS,
    "mpi": ["kill", "stop", "kill_launcher"],
}
# mpirun's --tag-output prefix: [jobid,rank]<stdout>: or <stderr>:
MPI_TAG = re.compile(r"\[\d+,(\d+)\]<std(?:out|err)>:(.*)")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(path, timeout_ms, steps):
    """The environment every rank of a job starts with."""
    env = dict(os.environ)
    env["FAULT_TIMEOUT_MS"] = str(timeout_ms)
    env["FAULT_STEPS"] = str(steps)
    if path == "tcp":
        env["DISTKIT_SHM"] = "0"
    return env


def popen_group(cmd, env):
    """Starts `cmd` in a session of its own (a kill of the group reaches all
    it starts), its output piped."""
    return subprocess.Popen(cmd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)


def start_distrun(args, world, env):
    return popen_group([args.distrun, "--nproc-per-node", str(world),
                        "--master-port", "0", "--", args.rank], env)


class RankJob:
    """What both kinds of job share: rank pids (as each prints its own),
    ranks started directly, end detection by pid, and the final kill.
    Subclasses set world, procs, pids, lock, launcher and define _read."""

    def _start_direct(self, args, env, extra=lambda r: {}):
        """Starts the ranks torchrun-style, rank 0 hosting the store;
        extra(r) adds variables for rank r."""
        port = free_port()
        for r in range(self.world):
            e = dict(env, RANK=str(r), WORLD_SIZE=str(self.world),
                     LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(self.world),
                     MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                     **extra(r))
            p = popen_group([args.rank], e)
            self.procs.append(p)
            threading.Thread(target=self._read, args=(r, p),
                             daemon=True).start()

    def wait_for_pid(self, rank, limit, poll=0.005):
        end = time.monotonic() + limit
        while time.monotonic() < end:
            with self.lock:
                if rank in self.pids:
                    return self.pids[rank]
            time.sleep(poll)
        return None

    def _reap(self, ends):
        """Records in `ends` now as the end of each rank whose pid stopped
        running; returns the ranks that were running before this look, and
        now."""
        with self.lock:
            running = {r: p for r, p in self.pids.items() if r not in ends}
        now = time.monotonic()
        for r, p in running.items():
            if not alive(p):
                with self.lock:
                    ends[r] = now
        return running, now

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


class Job(RankJob):
    """The ranks of one run, started directly (rank 0 hosts the store) or
    under distrun; their pids as each prints them."""

    def __init__(self, args, world, path, kind, victim):
        self.world = world
        self.procs = []
        self.pids = {}  # rank -> pid of the rank's process
        self.output = collections.defaultdict(list)
        self.exit_times = {}
        self.lock = threading.Lock()
        env = rank_env(path, int(args.timeout * 1000), args.steps)
        self.launcher = None
        self.mpi = path == "mpi"
        if self.mpi:
            env.update(FAULT_LAUNCHER="mpi", FAULT_BACKEND="mpi")
            # OpenMPI's session files under a private directory: tests run
            # in PID namespaces, where concurrent mpiruns get the same job
            # ids and would collide (as in cc/comm/mpi/mpirun_test.sh).
            self.session = tempfile.mkdtemp(prefix="dkfi.", dir="/tmp")
            env["TMPDIR"] = self.session
            self.launcher = popen_group(
                ["mpirun", "--allow-run-as-root", "--oversubscribe",
                 "--mca", "btl", "self,vader,tcp",
                 "--mca", "btl_tcp_if_include", "lo",
                 "--mca", "btl_vader_single_copy_mechanism", "none",
                 "--mca", "btl_vader_backing_directory", self.session,
                 "--tag-output", "-np", str(world), args.rank], env)
            threading.Thread(target=self._read_mpirun, daemon=True).start()
            threading.Thread(target=self._watch_exits, daemon=True).start()
            return
        if kind == "kill_launcher":
            self.launcher = start_distrun(args, world, env)
            threading.Thread(target=self._read_distrun, daemon=True).start()
            return
        # Only the victim's parent never reaps it.
        zombie = kind == "zombie"
        self._start_direct(args, env, lambda r: {"FAULT_ZOMBIE": "1"}
                           if zombie and r == victim else {})

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

    def _read_mpirun(self):
        for raw in self.launcher.stdout:
            line = raw.decode(errors="replace").rstrip()
            m = MPI_TAG.match(line)
            with self.lock:
                self.output["mpirun"].append(line)
                if m:
                    r, text = int(m.group(1)), m.group(2)
                    self.output[r].append(text)
                    p = re.match(r"pid=(\d+)", text)
                    if p:
                        self.pids[r] = int(p.group(1))

    def _watch_exits(self):
        """Ranks under mpirun are not our children: each one's end is when
        its pid stops running."""
        while True:
            launcher_done = self.launcher.poll() is not None
            with self.lock:
                started = len(self.pids) == self.world
            running, now = self._reap(self.exit_times)
            if launcher_done and started and not running:
                return
            if launcher_done and not any(alive(p) for p in running.values()):
                with self.lock:
                    for r in range(self.world):
                        self.exit_times.setdefault(r, now)
                return
            time.sleep(0.005)

    def kill_all(self):
        super().kill_all()
        if self.mpi:
            shutil.rmtree(self.session, ignore_errors=True)


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
            if job.launcher.poll() is not None:  # the job ended first
                result["no_fault"] = True
                time.sleep(0.3)  # the readers take the last lines
                with job.lock:
                    said = [l for lines in job.output.values() for l in lines]
                done = {m.group(1) for l in said
                        for m in [re.search(r"rank (\d+) done", l)] if m}
                if len(done) < world:
                    result["bad"].append("the launcher ended before the "
                                         "fault without every rank done")
                return result
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
            if job.mpi:
                # Exit codes belong to mpirun; the output says what happened.
                with job.lock:
                    said = list(job.output[r])
                if any("wrong sum" in l for l in said):
                    result["bad"].append(f"rank {r}: " + " | ".join(said[-3:]))
                continue
            code = job.procs[r].poll()
            if code not in (0, 3, None):
                tail = " | ".join(job.output[r][-3:])
                result["bad"].append(f"rank {r} exit {code}: {tail}")
            if code == 3 and not any("failed" in l for l in job.output[r]):
                result["bad"].append(f"rank {r} failed without a message")
        return result
    finally:
        job.kill_all()


def shm_segments_of(pids):
    """The distkit segments in /dev/shm created by one of `pids` of this pid
    namespace (their names start with distkit-<creator pid>-<its pid
    namespace>-: in a test sandbox, pids are small numbers of its own
    namespace, and another sandbox's rank may have the same one); None: all
    of this namespace's."""
    try:
        names = os.listdir("/dev/shm")
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except FileNotFoundError:
        return []
    pids = None if pids is None else set(pids)
    return sorted(n for n in names
                  for m in [re.match(r"distkit-(\d+)-(\d+)-", n)]
                  if m and int(m.group(2)) == namespace
                  and (pids is None or int(m.group(1)) in pids))


class StartupJob(RankJob):
    """A job for a start-up kill: under distrun (its ranks are not our
    children: an exit is seen as the pid stopping running) or started
    directly. Records each rank's pid, output and end."""

    def __init__(self, args, world, path, launcher):
        self.world = world
        self.pids = {}
        self.output = collections.defaultdict(list)
        self.ends = {}
        self.lock = threading.Lock()
        self.procs = []
        self.launcher = None
        # Waiting out a 10 s timeout fails the bound.
        env = rank_env(path, 10000, 30)
        if path != "tcp":
            env.pop("DISTKIT_SHM", None)
        if launcher == "distrun":
            self.launcher = start_distrun(args, world, env)
            self.reader = threading.Thread(target=self._read_distrun,
                                           daemon=True)
            self.reader.start()
        else:
            self._start_direct(args, env)
        threading.Thread(target=self._watch, daemon=True).start()

    def _note(self, r, text):
        with self.lock:
            self.output[r].append(text)
            m = re.match(r"pid=(\d+)", text)
            if m:
                self.pids[r] = int(m.group(1))

    def _read(self, r, p):
        for raw in p.stdout:
            self._note(r, raw.decode(errors="replace").rstrip())

    def _read_distrun(self):
        for raw in self.launcher.stdout:
            line = raw.decode(errors="replace").rstrip()
            m = re.match(r"\[rank(\d+)\]: (.*)", line)
            if m:
                self._note(int(m.group(1)), m.group(2))
            else:
                with self.lock:
                    self.output["distrun"].append(line)

    def _watch(self):
        """Each rank's end, to within 2 ms, by its pid."""
        while True:
            with self.lock:
                if len(self.ends) == self.world:
                    return
            self._reap(self.ends)
            time.sleep(0.002)

    def exit_code(self, r):
        return self.procs[r].poll() if self.procs else None


def startup_run(args, rng, path, launcher, window):
    """One start-up kill, `window` s at most after the victim printed its
    pid; the result's "bad" lists what went wrong. A kill that would land
    after some rank's init ended is not made ("after_init", with "init":
    how long start-up took)."""
    world = rng.choice([3, 4])
    victim = rng.randrange(world) if launcher == "distrun" else \
        rng.randrange(1, world)
    delay = rng.uniform(0.0, window)
    result = {"path": path, "launcher": launcher, "world": world,
              "victim": victim, "delay": round(delay, 3), "bad": []}
    # Only a segment that appears during the job counts (in a PID
    # namespace, an older job's creator may have had one of these pids).
    before = set(shm_segments_of(None))
    job = StartupJob(args, world, path, launcher)
    try:
        pid = job.wait_for_pid(victim, 10, poll=0.001)
        if pid is None:
            result["bad"].append(f"rank {victim} never printed its pid")
            return result
        start = time.monotonic()
        time.sleep(delay)
        with job.lock:
            # Killing a rank after start-up is not this test's case.
            ahead = any(l.startswith("joined") for r in range(world)
                        for l in job.output[r])
        if ahead:
            result["after_init"] = True
            while time.monotonic() < start + 10:
                with job.lock:
                    if all(any(l.startswith("joined") for l in job.output[r])
                           for r in range(world)):
                        break
                time.sleep(0.001)
            result["init"] = time.monotonic() - start
            return result
        kill = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        result["at"] = round(kill - start, 3)  # after the victim's pid
        survivors = [r for r in range(world) if r != victim]
        limit = kill + args.startup_bound + 3  # the bound, and time to see why
        while time.monotonic() < limit:
            with job.lock:
                if all(r in job.ends for r in survivors) and \
                        len(job.pids) == world:
                    break
            time.sleep(0.005)
        if job.launcher is not None:  # its forwarded lines, all of them
            try:
                job.launcher.wait(timeout=args.startup_bound + 5)
                job.reader.join(timeout=2)
            except subprocess.TimeoutExpired:
                pass
        with job.lock:
            ends = {r: job.ends.get(r) for r in survivors}
            said = {r: list(job.output[r]) for r in survivors}
        if any(l.startswith("joined") for r in survivors for l in said[r]):
            # A survivor had finished start-up (the victim's pid line came
            # late): a kill after init, the other runs' case.
            result["after_init"] = True
            result["init"] = kill - start
            return result
        late = [r for r, t in ends.items() if t is None]
        if late:
            result["bad"].append(f"rank(s) {late} still running "
                                 f"{limit - kill:.1f}s after the kill")
        took = max((t - kill for t in ends.values() if t is not None),
                   default=0.0)
        result["took"] = round(took, 3)
        if took > args.startup_bound:
            result["bad"].append(f"last survivor ended {took:.3f}s after the "
                                 f"kill (bound {args.startup_bound}s)")
            # What each survivor said and when it ended: where it waited.
            result["survivors"] = {
                r: {"ended": round(ends[r] - kill, 3) if ends[r] is not None else None,
                    "said": said[r][-2:]} for r in survivors}
        for r in survivors:
            errors = [l for l in said[r] if "failed" in l]
            code = job.exit_code(r)
            if not errors:
                result["bad"].append(
                    f"rank {r} ended without an error of its own (exit "
                    f"{code}): " + " | ".join(said[r][-3:]))
            elif not any(re.search(rf"\brank {victim}\b", l) for l in errors):
                result["bad"].append(f"rank {r}'s error does not name rank "
                                     f"{victim}: {errors[-1]}")
            if code not in (None, 3):
                result["bad"].append(f"rank {r} exit {code}")
        if result["bad"]:
            with job.lock:
                result["distrun"] = job.output.get("distrun", [])[-3:]
            return result
        # Every rank is gone; whoever survived must have removed the job's
        # segment.
        with job.lock:
            pids = list(job.pids.values())
        left = [n for n in shm_segments_of(pids) if n not in before]
        if left:
            result["bad"].append(f"left in /dev/shm: {left}")
        return result
    finally:
        job.kill_all()


def report(what, res, runs, i):
    """Prints a failed run, and an ok one while the runs are few (every
    20th beyond 60); returns 1 if it failed."""
    if res["bad"]:
        print(f"{what}: FAILED {res}", flush=True)
        return 1
    if runs <= 60 or i % 20 == 0:
        print(f"{what}: ok {res}", flush=True)
    return 0


def run_startup_kills(args, rng):
    """--startup-runs start-up kills over every (path, launcher) in turn;
    the number that failed."""
    combos = [(p, l) for l in args.startup_launchers for p in ("shm", "tcp")]
    took = collections.defaultdict(list)
    # Per combination, the window kills are drawn from: start-up's length
    # as last seen here (it varies with the machine and its load), so that
    # kills spread over every phase of it.
    window = {c: args.startup_window for c in combos}
    after = failures = 0
    for i in range(args.startup_runs):
        path, launcher = combos[i % len(combos)]
        for _ in range(4):  # until a kill lands in start-up
            res = startup_run(args, rng, path, launcher,
                              window[(path, launcher)])
            if not res.get("after_init"):
                break
            after += 1
            window[(path, launcher)] = min(window[(path, launcher)],
                                           res["init"])
        if res.get("after_init"):
            continue
        if not res["bad"]:
            took[(path, launcher)].append(res["took"])
        failures += report(f"start-up kill {i}", res, args.startup_runs, i)
    print("\nstart-up kills: path launcher  kills  kill -> last survivor's "
          "error (s): median  max")
    for (path, launcher), ts in sorted(took.items()):
        ts.sort()
        print(f"  {path:<4} {launcher:<8} {len(ts):>5}  "
              f"{ts[len(ts) // 2]:>37.3f}  {ts[-1]:.3f}")
    print(f"{failures} of {args.startup_runs} start-up kills failed; {after} "
          f"drawn after init were redrawn", flush=True)
    # A combination whose every kill landed after init tested nothing: that
    # must not pass as a test of start-up.
    for combo in combos[:args.startup_runs]:
        if not took[combo] and failures == 0:
            print(f"start-up kills: FAILED: no kill of {combo[0]} / {combo[1]} "
                  f"landed in start-up", flush=True)
            failures += 1
    return failures


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
    ap.add_argument("--paths", default="shm,tcp,mpi",
                    help="comma-separated paths (shm, tcp, mpi)")
    ap.add_argument("--stacks", action="store_true",
                    help="print a hung rank's stacks (gdb)")
    ap.add_argument("--startup-runs", type=int, default=0,
                    help="start-up kills, after the other runs")
    ap.add_argument("--startup-window", type=float, default=0.25,
                    help="latest start-up kill after the victim starts, "
                         "seconds (narrowed to start-up's length as seen)")
    ap.add_argument("--startup-bound", type=float, default=1.0,
                    help="kill to every survivor's error, seconds")
    ap.add_argument("--startup-launchers", default="distrun",
                    help="comma-separated: distrun, plain")
    args = ap.parse_args()
    args.startup_launchers = args.startup_launchers.split(",")
    kinds = args.kinds.split(",") if args.kinds else KINDS
    args.paths = args.paths.split(",")
    if "mpi" in args.paths and shutil.which("mpirun") is None:
        print("fault injection: no mpirun here; the MPI path is SKIPPED",
              flush=True)
        args.paths.remove("mpi")
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    print(f"fault injection: {args.runs} runs, seed {seed}, op timeout "
          f"{args.timeout}s", flush=True)
    stats = collections.defaultdict(lambda: {"runs": 0, "hangs": 0,
                                             "worst": 0.0, "bad": 0,
                                             "paths": collections.Counter()})
    failures = 0
    # Every (kind, path) pair in turn, so a run of len(combos) covers each
    # once whatever the seed; more runs go round again with other delays,
    # victims and world sizes.
    combos = [(kind, path) for kind in kinds for path in args.paths
              if kind in PATHS[path]]
    for i in range(args.runs):
        kind, path = combos[i % len(combos)]
        res = one_run(args, rng, kind, path)
        s = stats[kind]
        s["runs"] += 1
        s["paths"][path] += 1
        s["hangs"] += res["hang"]
        s["worst"] = max(s["worst"], res.get("took", 0.0))
        bad = report(f"run {i}", res, args.runs, i)
        s["bad"] += bad
        failures += bad
    print("\nkind            runs  hangs  bad  worst fault->last exit (s)  "
          "runs by path")
    for kind in KINDS:
        s = stats[kind]
        if s["runs"]:
            paths = ", ".join(f"{p} {n}" for p, n in sorted(s["paths"].items()))
            print(f"{kind:<15} {s['runs']:>4}  {s['hangs']:>5}  {s['bad']:>3}  "
                  f"{s['worst']:>26.2f}  {paths}")
    print(f"\n{failures} of {args.runs} runs failed (seed {seed})")
    if args.startup_runs:
        failures += run_startup_kills(args, rng)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
