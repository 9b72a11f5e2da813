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
(median of medians). "paired" is the median over rounds of this/DDP taken
within each round, and its range: a machine whose speed drifts between
rounds moves both sides of a round alike, so it settles the ratio sooner.

With --wrappers libtorch (or python,libtorch) the same arms run through
LibTorch (fsdp_bench_cc: distkit's C++ DistributedDataParallel and
FullyShardedDataParallel, "cc:" rows, each compared with cc:ddp); "overlap"
is not taken there.

    bazel run //tools/dkbench:fsdp_bench -- --world-size 2 --repeats 3 [--wrappers python,libtorch]
"""
import argparse
import os
import statistics
import sys

from bench_common import distrun, result_fields, run_job, tool

IMPLS = ["ddp", "FULL_SHARD", "FULL_SHARD+prefetch", "SHARD_GRAD_OP", "NO_SHARD"]


def run(cmd):
    for line in run_job(cmd, 900):
        if line.startswith("RESULT"):
            return result_fields(line)
    sys.exit(f"no RESULT from {' '.join(cmd)}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--wrappers", default="python",
                        help="python (distkit.fsdp), libtorch (fsdp_bench_cc) or both")
    args = parser.parse_args()
    wrappers = args.wrappers.split(",")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    base = distrun(args.world_size)
    commands = {}
    if "python" in wrappers:
        commands.update({impl: base + ["/usr/bin/python3", tool("fsdp_bench_worker.py"),
                                       "--impl", impl] for impl in IMPLS})
    if "libtorch" in wrappers:
        commands.update({f"cc:{impl}": base + [tool("fsdp_bench_cc"), "--impl", impl]
                         for impl in IMPLS})
    results = {name: [] for name in commands}
    last = {}
    for _ in range(args.repeats):
        for name, command in commands.items():
            fields = run(command)
            results[name].append(float(fields["median_ms"]))
            last[name] = fields
    n = args.world_size
    first = next(iter(commands))
    total, largest = int(last[first]["total"]), int(last[first]["largest"])
    print(f"Sharded training, {total / 4e6:.1f}M float32 parameters ({total / 2**20:.0f} MiB), "
          f"batch 32, SGD momentum, world size {n}, CPU, {args.repeats} rounds of 10 steps")
    print(f"{'implementation':<25}{'step ms':>9}{'this/DDP':>10}{'state MiB':>11}"
          f"{'bound MiB':>11}{'RSS MiB':>9}{'overlap':>13}{'paired (range)':>22}   rounds")
    for name in commands:
        impl = name.split(":")[-1]
        ddp = "cc:ddp" if name.startswith("cc:") else "ddp"
        ms = statistics.median(results[name])
        state = int(last[name]["state_bytes"])
        bound = {  # parameters + gradients + momentum, and what each strategy adds
            "ddp": 3 * total,
            "NO_SHARD": 3 * total + largest,  # + one unit's gradient while it reduces
            "FULL_SHARD": 3 * total / n + 2 * largest,  # + one unit's full params and grads
            "FULL_SHARD+prefetch": 3 * total / n + 3 * largest,  # + the next unit's gather
            "SHARD_GRAD_OP": 3 * total / n + total + largest,  # full params kept for backward
        }[impl]
        overlap = "-"
        if "overlap" in last[name]:
            hit, gathers, ms_beside = last[name]["overlap"].split("/")
            overlap = f"{hit}/{gathers} {ms_beside}ms"
        paired = [v / d for v, d in zip(results[name], results[ddp])]
        paired_text = (f"{statistics.median(paired):.2f} ({min(paired):.2f}-"
                       f"{max(paired):.2f})")
        print(f"{name:<25}{ms:>9.1f}{ms / statistics.median(results[ddp]):>10.2f}"
              f"{state / 2**20:>11.1f}"
              f"{bound / 2**20:>11.1f}{int(last[name]['rss']) / 2**20:>9.0f}{overlap:>13}"
              f"{paired_text:>22}   "
              f"{', '.join(f'{v:.0f}' for v in results[name])}")
    copies = {name: fields["grad_copies"] for name, fields in last.items()
              if "grad_copies" in fields and name != "cc:ddp"}
    if copies:  # LibTorch FSDP: gradients copied instead of reduced in place
        print("gradient copies in the last round's run (LibTorch FSDP): " +
              ", ".join(f"{name} {n}" for name, n in copies.items()))


if __name__ == "__main__":
    main()
