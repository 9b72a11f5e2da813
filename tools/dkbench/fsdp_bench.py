"""Sharded training side by side with DDP, in one run: step time and
per-rank memory of distkit's DDP and distkit.fsdp (FULL_SHARD, SHARD_GRAD_OP,
NO_SHARD; one unit per layer; FULL_SHARD also with forward_prefetch and
BACKWARD_PRE, the next unit's all-gather running while this one computes) on the DDP benchmark's ~26M-parameter MLP.
Memory is the model state a rank holds at peak (parameters, gradients,
optimizer state, gathered full parameters: counted from the library's and the
wrapper's own accounts) beside each strategy's bound (FULL_SHARD: 3 x
total / N + the largest unit's full parameters and gradients), and the peak
RSS. "overlap" is the last step's timeline on rank 0: all-gathers that ran
while another unit computed / all-gathers, and the milliseconds they ran
beside that compute. The implementations alternate for --repeats rounds
(median of medians).

    bazel run //tools/dkbench:fsdp_bench -- --world-size 2 --repeats 3
"""
import argparse
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
IMPLS = ["ddp", "FULL_SHARD", "FULL_SHARD+prefetch", "SHARD_GRAD_OP", "NO_SHARD"]


def tool(*parts):
    path = os.path.join(HERE, *parts)
    if not os.path.exists(path):
        sys.exit(f"{path} not found; run through bazel run //tools/dkbench:fsdp_bench")
    return path


def run(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    for line in out.stdout.splitlines():
        line = line.split("]: ", 1)[-1]
        if line.startswith("RESULT"):
            return dict(f.split("=") for f in line.split()[1:])
    sys.exit(f"no RESULT from {' '.join(cmd)}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--world-size", type=int, default=2)
    args = parser.parse_args()
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    base = [tool("..", "distrun", "distrun"), "--nproc-per-node", str(args.world_size),
            "--master-port", "0", "--", "/usr/bin/python3", tool("fsdp_bench_worker.py"), "--impl"]
    results = {impl: [] for impl in IMPLS}
    last = {}
    for _ in range(args.repeats):
        for impl in IMPLS:
            fields = run(base + [impl])
            results[impl].append(float(fields["median_ms"]))
            last[impl] = fields
    n = args.world_size
    total, largest = int(last["ddp"]["total"]), int(last["ddp"]["largest"])
    ddp_ms = statistics.median(results["ddp"])
    print(f"Sharded training, {total / 4e6:.1f}M float32 parameters ({total / 2**20:.0f} MiB), "
          f"batch 32, SGD momentum, world size {n}, CPU, {args.repeats} rounds of 10 steps")
    print(f"{'implementation':<22}{'step ms':>9}{'this/DDP':>10}{'state MiB':>11}"
          f"{'bound MiB':>11}{'RSS MiB':>9}{'overlap':>13}   rounds")
    for impl in IMPLS:
        ms = statistics.median(results[impl])
        state = int(last[impl]["state_bytes"])
        bound = {  # parameters + gradients + momentum, and what each strategy adds
            "ddp": 3 * total,
            "NO_SHARD": 3 * total + largest,  # + one unit's gradient while it reduces
            "FULL_SHARD": 3 * total / n + 2 * largest,  # + one unit's full params and grads
            "FULL_SHARD+prefetch": 3 * total / n + 3 * largest,  # + the next unit's gather
            "SHARD_GRAD_OP": 3 * total / n + total + largest,  # full params kept for backward
        }[impl]
        overlap = "-"
        if "overlap" in last[impl]:
            hit, gathers, ms_beside = last[impl]["overlap"].split("/")
            overlap = f"{hit}/{gathers} {ms_beside}ms"
        print(f"{impl:<22}{ms:>9.1f}{ms / ddp_ms:>10.2f}{state / 2**20:>11.1f}"
              f"{bound / 2**20:>11.1f}{int(last[impl]['rss']) / 2**20:>9.0f}{overlap:>13}   "
              f"{', '.join(f'{v:.0f}' for v in results[impl])}")


if __name__ == "__main__":
    main()
