"""DDP step time side by side: distkit's C++ DDP, distkit's Python DDP and
torch's DistributedDataParallel (Gloo), plus distkit C++ without overlap
(backward, then one all_reduce), on a ~26M-parameter float32 MLP, batch 32,
world size 2, CPU. The implementations alternate for --repeats rounds; the
table gives each one's median over rounds, the ratio torch/impl (> 1: faster
than torch DDP), and the C++ reducer's last-step bucket timeline, which shows
the bucket all_reduces launched during backward.

    bazel run //tools/dkbench:ddp_bench -- --repeats 3
"""
import argparse
import os
import statistics
import sys

from bench_common import distrun, result_fields, run_job, tool


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--world-size", type=int, default=2)
    args = parser.parse_args()
    base = distrun(args.world_size)
    python = "/usr/bin/python3"
    env_path = os.pathsep.join(p for p in sys.path if p)
    os.environ["PYTHONPATH"] = env_path
    commands = {
        "distkit-cc": base + [tool("ddp_bench_cc")],
        "distkit-python": base + [python, tool("ddp_bench_worker.py"), "--impl", "distkit"],
        "torch": base + [python, tool("ddp_bench_worker.py"), "--impl", "torch"],
        "distkit-cc-no-overlap": base + [tool("ddp_bench_cc"), "--no-overlap"],
    }
    results = {name: [] for name in commands}
    trace = []
    params = None
    for _ in range(args.repeats):
        for name, cmd in commands.items():
            lines = run_job(cmd, 600)
            for line in lines:
                if line.startswith("RESULT"):
                    fields = result_fields(line)
                    results[name].append(float(fields["median_ms"]))
                    params = int(fields["params"])
            if name == "distkit-cc":  # keep the last round's timeline
                trace = [line for line in lines if line.startswith(("TRACE", "BUCKET"))]
    torch_ms = statistics.median(results["torch"])
    print(f"DDP step, {params / 1e6:.1f}M float32 parameters, batch 32, world size "
          f"{args.world_size}, CPU, {args.repeats} rounds of 10 steps (median of medians)")
    print(f"{'implementation':<24}{'step ms':>10}{'torch/this':>12}   rounds")
    for name, values in results.items():
        ms = statistics.median(values)
        print(f"{name:<24}{ms:>10.1f}{torch_ms / ms:>12.2f}   {', '.join(f'{v:.0f}' for v in values)}")
    print("\ndistkit-cc reducer timeline of the last step (times from the start of backward):")
    for line in trace:
        print("  " + line)


if __name__ == "__main__":
    main()
