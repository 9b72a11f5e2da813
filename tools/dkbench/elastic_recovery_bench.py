"""How long distkit.elastic takes to recover from a lost rank, and what its
snapshots cost (issue 39's done-when figures).

    /usr/bin/python3 tools/dkbench/elastic_recovery_bench.py [--ranks 4]
        [--state-mb 100] [--commit-every 10] [--steps 24] [--die-at 12]
        [--fsdp] [--no-overlap] [--die-at -1]

Runs a DDP job (MMDistributedDataParallel, SGD with momentum: the state is
the parameters plus as many momentum values, --state-mb in all) under
``distrun --max-replacements 1``; rank 1 SIGKILLs itself before step
--die-at. Reported, from timestamps the ranks print (one host, one clock):
- kill -> first step: from the SIGKILL to the end of the first step the
  replacement completes;
- replacement's entry -> first step: from the replacement's call into
  distkit (init_dist, after its interpreter started and imported torch and
  distkit) to the same moment;
- the snapshot's cost: what a commit adds to the critical path (the mean
  commit() time plus how much longer the step after a commit takes than
  the other steps: the copy overlaps that step, whose optimizer step waits
  for it) over the median step time times --commit-every (its share of each
  step, amortised), and its memory. --no-overlap copies inside commit().
  Also the mean time per step with the commits in it (every step and
  commit timed, divided by the steps): beside a run with --commit-every
  past --steps (no commit but elastic.run's first), what the snapshots
  cost however long their background work lasts.
--fsdp: FullyShardedDataParallel (FULL_SHARD, a unit per Linear) instead,
  whose commit exchanges shards with the neighbours (in the background
  unless --no-overlap). --die-at -1: nobody dies (the cost figures only).
Needs libdistkit.so and distrun built (bazel build //capi:libdistkit.so
//tools/distrun:distrun)."""
import argparse
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def rank_main(args):
    t_enter = time.time()  # the interpreter is up, torch and distkit imported
    import torch
    from distkit import dist, elastic
    from distkit.model import MMDistributedDataParallel
    replacement = elastic.membership.is_replacement()
    t_enter = time.time()
    dist.init_dist("pytorch", backend="gloo", timeout=60)
    rank = dist.get_rank()
    # Parameters: half the state (momentum is the other half), float32.
    width = 1024
    layers = max(1, math.ceil(args.state_mb * 1e6 / 2 / 4 / (width * width)))
    torch.manual_seed(0)
    net = torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=False) for _ in range(layers)])
    if args.fsdp:
        from distkit.fsdp import FullyShardedDataParallel, ModuleWrapPolicy, ShardingStrategy
        model = FullyShardedDataParallel(net, sharding_strategy=ShardingStrategy.FULL_SHARD,
                                         auto_wrap_policy=ModuleWrapPolicy({torch.nn.Linear}))
    else:
        model = MMDistributedDataParallel(net)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    batch = 8
    sampler = elastic.ElasticSampler(args.steps * batch * dist.get_world_size(),
                                     batch * dist.get_world_size(), shuffle=False)
    state = elastic.State(model=model, optimizer=opt, sampler=sampler,
                          overlap_commit=not args.no_overlap)
    steps, after, commits = [], [], []
    follows_commit = [False]
    first_after = [None]

    def train(state):
        for indices in state.sampler:
            step = state.sampler.batch - 1
            if rank == 1 and step == args.die_at and not replacement:
                print(f"T_KILL {time.time():.6f}", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            t0 = time.perf_counter()
            x = torch.randn(len(indices), width)
            opt.zero_grad()
            model(x).square().mean().backward()
            opt.step()
            (after if follows_commit[0] else steps).append(time.perf_counter() - t0)
            follows_commit[0] = False
            if first_after[0] is None and (replacement or state.recoveries):
                first_after[0] = time.time()
                print(f"T_FIRST_STEP rank {rank} {'replacement' if replacement else 'survivor'} "
                      f"{first_after[0]:.6f}", flush=True)
            if state.sampler.batch % args.commit_every == 0:
                t0 = time.perf_counter()
                state.commit()
                commits.append(time.perf_counter() - t0)
                follows_commit[0] = True

    elastic.run(train, state)
    print(f"PER_STEP rank {rank} {(sum(steps) + sum(after) + sum(commits)) / max(1, len(steps) + len(after)):.5f}",
          flush=True)
    if replacement:
        print(f"T_ENTER {t_enter:.6f}", flush=True)
    step_s = statistics.median(steps)
    if commits and after:
        extra = statistics.mean(after) - step_s
        print(f"COST rank {rank} step {step_s:.4f} commit {statistics.mean(commits):.4f} "
              f"next_step_extra {extra:.4f} snapshot_bytes {state.snapshot_bytes()}", flush=True)
    dist.barrier()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--state-mb", type=float, default=100)
    parser.add_argument("--commit-every", type=int, default=10)
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--die-at", type=int, default=12)
    parser.add_argument("--no-overlap", action="store_true",
                        help="copy the snapshot inside commit() (overlap_commit=False)")
    parser.add_argument("--fsdp", action="store_true",
                        help="FullyShardedDataParallel (FULL_SHARD) instead of DDP")
    parser.add_argument("--rank-main", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank_main:
        return rank_main(args)
    env = dict(os.environ)
    env.setdefault("DISTKIT_LIBRARY", os.path.join(ROOT, "bazel-bin/capi/libdistkit.so"))
    env["PYTHONPATH"] = os.path.join(ROOT, "bindings/python") + os.pathsep + env.get("PYTHONPATH", "")
    distrun = os.path.join(ROOT, "bazel-bin/tools/distrun/distrun")
    cmd = [distrun, "--nproc-per-node", str(args.ranks), "--master-port", "0",
           "--max-replacements", "1", "--", sys.executable, os.path.abspath(__file__),
           "--rank-main"] + [a for a in sys.argv[1:]]
    out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, timeout=600).stdout
    killed = args.die_at >= 0
    if ("T_FIRST_STEP" if killed else "PER_STEP") not in out:
        print(out)
        return 1
    costs = [(float(s), float(c), float(x), int(b)) for s, c, x, b in
             re.findall(r"COST rank \d+ step (\S+) commit (\S+) next_step_extra (\S+) "
                        r"snapshot_bytes (\d+)", out)]
    print(f"ranks {args.ranks}, {'FSDP' if args.fsdp else 'DDP'}, state {args.state_mb:.0f} MB "
          f"(parameters + momentum), commit every {args.commit_every} steps")
    if killed:
        t_kill = float(re.search(r"T_KILL (\S+)", out).group(1))
        t_enter = float(re.search(r"T_ENTER (\S+)", out).group(1))
        t_first = float(re.search(r"T_FIRST_STEP rank \d+ replacement (\S+)", out).group(1))
        print(f"kill -> replacement's first completed step: {t_first - t_kill:.2f} s")
        print(f"replacement's entry into distkit -> its first completed step: "
              f"{t_first - t_enter:.2f} s")
    per_step = statistics.median(float(t) for t in re.findall(r"PER_STEP rank \d+ (\S+)", out))
    print(f"per step with the commits in it: {per_step * 1e3:.1f} ms")
    if not costs:
        return 0
    step = statistics.median(c[0] for c in costs)
    commit = statistics.median(c[1] for c in costs)
    extra = statistics.median(c[2] for c in costs)
    cost = commit + max(0.0, extra)
    print(f"step {step * 1e3:.0f} ms, commit() {commit * 1e3:.1f} ms, the next step "
          f"{extra * 1e3:+.1f} ms ({'copied inside commit' if args.no_overlap else 'overlapped'}): "
          f"{100 * cost / (args.commit_every * step):.1f}% of each step amortised; "
          f"snapshot memory {max(c[3] for c in costs) / 1e6:.0f} MB per rank")
    return 0


if __name__ == "__main__":
    sys.exit(main())
