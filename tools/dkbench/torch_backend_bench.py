"""torch.distributed on distkit's backend against torch's own Gloo, side by
side in one job per world size (ranks bound to cores as the collective
benchmarks bind them): all_reduce latency / bus bandwidth
(torch.distributed.all_reduce through each group; at 4 bytes also
distkit.dist.all_reduce), and torch's DistributedDataParallel step (the DDP
benchmark's 26M-parameter MLP) on each, with the same step without DDP
measured in the same rounds, so each backend's exposed communication is
DDP's step minus that. Ratios are Gloo's / distkit's (> 1: distkit faster).
A timeline of one step per backend shows when each bucket's all_reduce was
issued and completed against backward's last gradient. CPU time per step
(the stepping thread's, and the other threads', where communication runs)
varies less than wall time on a shared machine.

    bazel run //tools/dkbench:torch_backend_bench -- --world-sizes 2,4

Where distkit's launcher is not built (a machine without Bazel, such as the
GPU machine tools/gpu_bundle.sh prepares a bundle for), `--launcher torchrun`
starts the ranks with torch's launcher instead (unbound to cores), with the
library, package and extension named by DISTKIT_LIBRARY, PYTHONPATH and
DISTKIT_C10D_EXTENSION:

    python3 tools/dkbench/torch_backend_bench.py --launcher torchrun
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

from bench_common import distrun, tool


def parse(stdout):
    rows = []
    for line in stdout.splitlines():
        if "RESULT" not in line:
            continue
        fields = line.split("]: ", 1)[-1].split()
        row = {"what": fields[1]}
        row.update(f.split("=", 1) for f in fields[2:] if "=" in f)
        rows.append(row)
    return rows


def report(n, rows):
    print(f"world size {n}")
    impl = [r for r in rows if r["what"] == "backend"]
    if impl and impl[0]["impl"] != "c++":
        print("  (the distkit backend ran on its Python fallback)")
    lat = {(r["backend"], int(r["bytes"])): float(r["us"]) for r in rows
           if r["what"] == "all_reduce"}
    print(f"{'all_reduce bytes':>18}{'distkit us':>12}{'gloo us':>10}{'gloo/distkit':>14}"
          f"{'distkit busbw GB/s':>20}")
    for size in sorted({s for _, s in lat}):
        d, g = lat[("distkit", size)], lat[("gloo", size)]
        busbw = 2 * (n - 1) / n * size / (d * 1e-6) / 1e9
        print(f"{size:>18}{d:>12.1f}{g:>10.1f}{g / d:>14.2f}{busbw:>20.2f}")
    d, k, g = lat[("distkit", 4)], lat[("distkit.dist", 4)], lat[("gloo", 4)]
    print(f"4-byte all_reduce per call (us): torch.distributed on distkit {d:.1f}, "
          f"distkit.dist {k:.1f} (torch/distkit.dist {d / k:.2f}), torch.distributed on gloo "
          f"{g:.1f}")
    step = {r["mode"]: float(r["ms"]) for r in rows if r["what"] == "ddp"}
    exposed = {r["backend"]: float(r["ms"]) for r in rows if r["what"] == "exposed"}
    print(f"torch DDP step (ms): distkit {step['distkit']:.1f}, gloo {step['gloo']:.1f}, "
          f"gloo/distkit {step['gloo'] / step['distkit']:.2f}")
    ratio = exposed["gloo"] / exposed["distkit"] if exposed["distkit"] > 0 else float("inf")
    print(f"torch DDP exposed communication (ms): distkit {exposed['distkit']:.1f}, "
          f"gloo {exposed['gloo']:.1f}, gloo/distkit {ratio:.2f} (the step without DDP: "
          f"{step['local']:.1f} ms; gloo's exposed share of its step "
          f"{exposed['gloo'] / step['gloo']:.0%})")
    cpu = {r["mode"]: (float(r["cpu_main_ms"]), float(r["cpu_others_ms"])) for r in rows
           if r["what"] == "ddp"}
    print(f"torch DDP CPU per step (ms; the stepping thread, the other threads): local "
          f"{cpu['local'][0]:.0f} + {cpu['local'][1]:.0f}, distkit {cpu['distkit'][0]:.0f} + "
          f"{cpu['distkit'][1]:.0f}, gloo {cpu['gloo'][0]:.0f} + {cpu['gloo'][1]:.0f}")
    for backend in ("distkit", "gloo"):
        buckets = [r for r in rows if r["what"] == "bucket" and r["backend"] == backend]
        if not buckets:
            continue
        last = float(buckets[0]["last_grad_ms"])
        during = sum(float(b["done_ms"]) <= last for b in buckets)
        spans = ", ".join(f"#{b['index']} {float(b['issued_ms']):.0f}-{float(b['done_ms']):.0f}"
                          for b in buckets)
        print(f"  {backend} buckets (ms from backward's start, issued-done): {spans}; last "
              f"gradient at {last:.0f}, backward returned at {float(buckets[0]['backward_ms']):.0f}"
              f"; {during} of {len(buckets)} completed during backward")
    print()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--world-sizes", default="2,4")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ddp-rounds", type=int, default=15)
    parser.add_argument("--batch", type=int, default=4,
                        help="the MLP's batch: small enough that Gloo's exposed communication "
                             "is a fifth of its step or more")
    parser.add_argument("--bucket-view", action="store_true",
                        help="DDP with gradient_as_bucket_view=True on both backends (no copy "
                             "of the gradients into the buckets)")
    parser.add_argument("--launcher", choices=("distrun", "torchrun"), default="distrun",
                        help="distkit's distrun (built by Bazel; ranks bound to cores) or "
                             "torch's torchrun (python -m torch.distributed.run --standalone)")
    args = parser.parse_args()
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    logs = tempfile.mkdtemp(prefix="torch_backend_bench.")  # torchrun's copies of the output
    for n in [int(x) for x in args.world_sizes.split(",")]:
        if args.launcher == "distrun":
            launch = distrun(n, "--cpu-bind", "core") + ["/usr/bin/python3"]
        else:
            launch = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                      # torch 1.13 knows only the underscored spellings, and on
                      # Python 3.11 crashes without redirected output.
                      "--nproc_per_node", str(n), "--redirects", "1", "--tee", "1",
                      "--log_dir", logs]
        cmd = launch + [tool("torch_backend_bench_worker.py"), "--rounds", str(args.rounds),
                        "--ddp-rounds", str(args.ddp_rounds), "--batch", str(args.batch)]
        if args.bucket_view:
            cmd.append("--bucket-view")
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
        if out.returncode != 0:
            sys.exit(f"world size {n} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
        report(n, parse(out.stdout))
    shutil.rmtree(logs, ignore_errors=True)


if __name__ == "__main__":
    main()
