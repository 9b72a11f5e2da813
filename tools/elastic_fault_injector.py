"""Fault injection at scale for distkit.elastic (issue 39): many elastic
jobs, each with a seeded random kill, every outcome classified.

    /usr/bin/python3 tools/elastic_fault_injector.py [--jobs 50] [--ranks 4]
        [--seed 1] [--bound 90]

Job i runs bindings/python/tests/elastic_multirank_test.py with
ELASTIC_SEED = seed + i, cycling through DDP and FSDP, each with a
replacement (distrun --max-replacements 2) or without (--min-ranks 1, the
survivors shrink). The seed picks the rank, the step and the point of the
kill: before the forward, mid-backward (FSDP: while the units' reduce-scatters
are in flight), after the optimizer step, at a commit (before it, after its
all_gather, or, FSDP, after the shards' exchange before the barrier that
confirms it), or a second rank killed during the recovery (at its start, or
at the snapshot's broadcast). Each job must
end within --bound seconds, either recovered with the parameters of an
uninterrupted run (the test checks them against plain torch) or with the
clear error the test expects (two FSDP neighbours lost: the shard they both
held is gone). Anything else is counted: a hang (the bound passed), a wrong
result (a failed check), an unexplained failure. Exit status 1 when any.
The test command runs the bounded version: the elastic_*_test targets,
each run one job with a fresh random seed.
Needs `bazel build //capi:libdistkit.so //tools/distrun:distrun`."""
import argparse
import collections
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROGRAM = os.path.join(ROOT, "bindings/python/tests/elastic_multirank_test.py")
MODES = (("ddp", ["--max-replacements", "2"], []),
         ("fsdp", ["--max-replacements", "2"], ["fsdp"]),
         ("ddp shrink", ["--min-ranks", "1"], ["shrink"]),
         ("fsdp shrink", ["--min-ranks", "1"], ["fsdp", "shrink"]))


def classify(code: int, out: str, timed_out: bool) -> str:
    if timed_out:
        return "hang"
    if "CHECK FAILED" in out:
        return "wrong result"
    if code == 0 and "two neighbours lost, a clear error" in out:
        return "clear error (expected)"
    if code == 0 and " passed" in out:
        return "recovered"
    return "unexplained failure"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--bound", type=float, default=90.0,
                        help="seconds each job may take in all")
    args = parser.parse_args()
    env = dict(os.environ)
    env.setdefault("DISTKIT_LIBRARY", os.path.join(ROOT, "bazel-bin/capi/libdistkit.so"))
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "bindings/python"), ROOT,
                                         env.get("PYTHONPATH", "")])
    distrun = os.path.join(ROOT, "bazel-bin/tools/distrun/distrun")
    counts = collections.Counter()
    bad = []
    for i in range(args.jobs):
        name, launcher, program_args = MODES[i % len(MODES)]
        seed = args.seed + i
        env["ELASTIC_SEED"] = str(seed)
        cmd = [distrun, "--nproc-per-node", str(args.ranks), "--master-port", "0", *launcher,
               "--timeout", str(int(args.bound)), "--", sys.executable, PROGRAM, *program_args]
        start = time.monotonic()
        try:
            done = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, timeout=args.bound + 15)
            code, out, timed_out = done.returncode, done.stdout, done.returncode == 124
        except subprocess.TimeoutExpired as e:
            code, out, timed_out = -1, e.stdout or "", True
        took = time.monotonic() - start
        kind = classify(code, out, timed_out)
        counts[kind] += 1
        plan = re.search(r"ELASTIC_SEED=\d+: ([^\n]*)", out)
        print(f"job {i:3d} {name:11s} seed {seed:5d}: {kind:22s} {took:5.1f} s  "
              f"{plan.group(1) if plan else ''}", flush=True)
        if kind in ("hang", "wrong result", "unexplained failure"):
            bad.append((i, seed, name, out))
    print("\n" + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())))
    for i, seed, name, out in bad:
        print(f"\n--- job {i} ({name}, ELASTIC_SEED={seed}), the last lines:")
        print("\n".join(out.splitlines()[-30:]))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
