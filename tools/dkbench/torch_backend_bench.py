"""torch.distributed on distkit's backend against torch's own Gloo, side by
side in one job per world size: all_reduce latency / bus bandwidth
(torch.distributed.all_reduce through each group) and torch's
DistributedDataParallel step (the DDP benchmark's 26M-parameter MLP) on
each. Ratios are Gloo's time / distkit's (> 1: distkit faster).

    bazel run //tools/dkbench:torch_backend_bench -- --world-sizes 2,4
"""
import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def tool(*parts):
    path = os.path.join(HERE, *parts)
    if not os.path.exists(path):
        sys.exit(f"{path} not found; run through bazel run //tools/dkbench:torch_backend_bench")
    return path


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--world-sizes", default="2,4")
    args = parser.parse_args()
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    for n in [int(x) for x in args.world_sizes.split(",")]:
        cmd = [tool("..", "distrun", "distrun"), "--nproc-per-node", str(n), "--master-port", "0",
               "--", "/usr/bin/python3", tool("torch_backend_bench_worker.py")]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        if out.returncode != 0:
            sys.exit(f"world size {n} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
        rows = [dict(f.split("=") for f in line.split("]: ", 1)[-1].split()[2:])
                | {"what": line.split("]: ", 1)[-1].split()[1]}
                for line in out.stdout.splitlines() if "RESULT" in line]
        print(f"world size {n}")
        print(f"{'all_reduce bytes':>18}{'distkit us':>12}{'gloo us':>10}{'gloo/distkit':>14}"
              f"{'distkit busbw GB/s':>20}")
        sizes = sorted({int(r["bytes"]) for r in rows if r["what"] == "all_reduce"})
        for size in sizes:
            t = {r["backend"]: float(r["us"]) for r in rows
                 if r["what"] == "all_reduce" and int(r["bytes"]) == size}
            busbw = 2 * (n - 1) / n * size / (t["distkit"] * 1e-6) / 1e9
            print(f"{size:>18}{t['distkit']:>12.1f}{t['gloo']:>10.1f}"
                  f"{t['gloo'] / t['distkit']:>14.2f}{busbw:>20.2f}")
        d = {r["backend"]: float(r["ms"]) for r in rows if r["what"] == "ddp"}
        print(f"torch DDP step (ms): distkit {d['distkit']:.1f}, gloo {d['gloo']:.1f}, "
              f"gloo/distkit {d['gloo'] / d['distkit']:.2f}\n")


if __name__ == "__main__":
    main()
