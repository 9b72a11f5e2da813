"""dkbench collectives: distkit (Gloo backend) beside torch.distributed (Gloo)
and OpenMPI, in one invocation, on the same sizes, like nccl-tests.

    bazel run //tools/dkbench:collectives_bench -- --world-sizes 2,4 \
        --max-bytes 268435456 --csv /tmp/dkbench.csv --png /tmp/dkbench.png

For each world size it runs the three implementations one after another
(each a fresh job), then prints per op and size: time per call, algbw =
bytes / time, busbw = algbw x factor (all_reduce 2(n-1)/n; all_gather and
reduce_scatter (n-1)/n; broadcast 1), and the speed ratio distkit vs each
peer (> 1: distkit is faster). Machines are noisy: compare ratios, rerun.
Ranks are bound as mpirun binds them by default: one core each when there
are as many cores (distrun --cpu-bind core; with more ranks than cores,
neither binds), so two ranks never share a core by chance in one run and
not in the next.
Each run also times one core's memcpy at the same sizes (memcpy_bench), and
a last table sets all_reduce's busbw against it, measured in the same run.
"""
import argparse
import csv
import subprocess
import sys
from collections import defaultdict

from bench_common import distrun, tool

FACTORS = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "gather": lambda n: (n - 1) / n,
    "scatter": lambda n: (n - 1) / n,
    "reduce": lambda n: 1.0,
    "all_to_all": lambda n: (n - 1) / n,
    "barrier": lambda n: 0.0,  # no data (its size is printed as 0)
}


def run(cmd, timeout):
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"  timed out: {' '.join(cmd[:3])} ...", file=sys.stderr)
        return []
    if out.returncode != 0:
        print(f"  failed ({out.returncode}): {' '.join(cmd[:6])}\n{out.stderr[-2000:]}", file=sys.stderr)
    rows = []
    for line in out.stdout.splitlines():
        line = line.split("]: ", 1)[-1]  # distrun's rank prefix
        parts = line.strip().split(",")
        if len(parts) == 5 and parts[0] in ("distkit", "torch_gloo", "openmpi", "distkit_mpi",
                                            "memcpy"):
            rows.append((parts[0], parts[1], int(parts[2]), int(parts[3]), float(parts[4])))
    return rows


def human(nbytes):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if nbytes < 1024:
            return f"{nbytes:g}{unit}"
        nbytes /= 1024
    return f"{nbytes:g}TiB"


def print_memcpy_bound(table, memcpy_us, busbw):
    """all_reduce busbw from 1 MiB against one core's memcpy of this run: at
    the same size, and at the largest size run (the DRAM-bound copy)."""
    if not memcpy_us:
        return
    largest = max(memcpy_us)
    gbs = {b: b / (us * 1e-6) / 1e9 for b, us in memcpy_us.items() if us > 0}
    keys = sorted((n, b) for (op, n, b) in table
                  if op == "all_reduce" and b >= 1 << 20 and "distkit" in table[(op, n, b)])
    if not keys or largest not in gbs:
        return
    print(f"\nall_reduce busbw against one core's memcpy in this run "
          f"(memcpy GB/s = bytes copied / time; largest size {human(largest)}: {gbs[largest]:.2f} GB/s)")
    head = (f"{'n':>2}{'size':>9} | {'busbw':>7} | {'memcpy same size':>16}{'share':>7} | "
            f"{'memcpy ' + human(largest):>16}{'share':>7}")
    print(head)
    print("-" * len(head))
    for n, b in keys:
        bw = busbw("all_reduce", n, b, table[("all_reduce", n, b)]["distkit"])
        same = gbs.get(b)
        same_cells = f"{same:>16.2f}{bw / same:>7.0%}" if same else f"{'n/a':>16}{'':>7}"
        print(f"{n:>2}{human(b):>9} | {bw:>7.2f} | {same_cells} | "
              f"{gbs[largest]:>16.2f}{bw / gbs[largest]:>7.0%}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--world-sizes", default="2,4")
    p.add_argument("--ops", default="all_reduce,all_gather,reduce_scatter,broadcast",
                   help="any of all_reduce, all_gather, reduce_scatter, broadcast, gather, "
                        "scatter, reduce, all_to_all, barrier; 'all' for the nine")
    p.add_argument("--min-bytes", type=int, default=4)
    p.add_argument("--max-bytes", type=int, default=64 << 20)
    p.add_argument("--batches", type=int, default=5)
    p.add_argument("--peers", default="torch_gloo,openmpi,distkit_mpi",
                   help="distkit_mpi: distkit on its mpi backend, under mpirun")
    p.add_argument("--csv", default="")
    p.add_argument("--png", default="")
    p.add_argument("--timeout", type=int, default=1800)
    p.add_argument("--repeats", type=int, default=3,
                   help="fresh jobs per implementation, alternated; the median time is kept")
    p.add_argument("--touch", action="store_true",
                   help="each call also writes its input before and reads its output after, "
                        "as a training step does (touch.h); memcpy is timed without")
    args = p.parse_args()
    if args.ops == "all":
        args.ops = ("all_reduce,all_gather,reduce_scatter,broadcast,gather,scatter,reduce,"
                    "all_to_all,barrier")
    common = ["--min-bytes", str(args.min_bytes), "--max-bytes", str(args.max_bytes),
              "--batches", str(args.batches)]
    sizes = list(common)
    if args.touch:
        common += ["--touch", "1"]
    rows = []
    for n in [int(x) for x in args.world_sizes.split(",")]:
        for repeat in range(args.repeats):
            print(f"world size {n}, run {repeat + 1}/{args.repeats}: distkit ...", file=sys.stderr, flush=True)
            bound = distrun(n, "--cpu-bind", "core")
            rows += run(bound + [tool("collective_bench"), "--ops", args.ops] + common, args.timeout)
            if "torch_gloo" in args.peers:
                print(f"world size {n}, run {repeat + 1}: torch.distributed (gloo) ...", file=sys.stderr, flush=True)
                torch_ops = args.ops  # torch_bench skips what its Gloo lacks
                rows += run(bound + ["/usr/bin/python3", tool("torch_bench.py"), "--ops", torch_ops] + common,
                            args.timeout)
            if "openmpi" in args.peers:
                print(f"world size {n}, run {repeat + 1}: openmpi ...", file=sys.stderr, flush=True)
                rows += run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(n),
                             tool("mpi_bench"), "--ops", args.ops] + common, args.timeout)
            if "distkit_mpi" in args.peers:
                print(f"world size {n}, run {repeat + 1}: distkit (mpi backend) ...", file=sys.stderr, flush=True)
                rows += run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(n),
                             tool("collective_bench"), "--backend", "mpi", "--ops", args.ops] + common,
                            args.timeout)
            print(f"world size {n}, run {repeat + 1}: memcpy (one core) ...", file=sys.stderr, flush=True)
            rows += run([tool("memcpy_bench")] + sizes, args.timeout)
    memcpy_samples = defaultdict(list)  # bytes -> [us]
    for impl, op, n, nbytes, us in rows:
        if impl == "memcpy":
            memcpy_samples[nbytes].append(us)
    rows = [r for r in rows if r[0] != "memcpy"]
    memcpy_us = {b: sorted(v)[len(v) // 2] for b, v in memcpy_samples.items()}
    samples = defaultdict(list)  # (op, n, bytes, impl) -> [us]
    for impl, op, n, nbytes, us in rows:
        samples[(op, n, nbytes, impl)].append(us)
    table = defaultdict(dict)  # (op, n, bytes) -> impl -> median us
    for (op, n, nbytes, impl), values in samples.items():
        table[(op, n, nbytes)][impl] = sorted(values)[len(values) // 2]

    def busbw(op, n, nbytes, us):
        return nbytes / (us * 1e-6) * FACTORS[op](n) / 1e9 if us else 0.0

    header = (f"{'op':<15}{'n':>2}{'size':>9} | {'distkit us':>11}{'busbw':>7} | {'torch us':>10}"
              f"{'busbw':>7}{'ratio':>7} | {'mpi us':>9}{'busbw':>7}{'ratio':>7} | {'dk-mpi us':>10}{'busbw':>7}{'mpi/it':>7}")
    print(header)
    print("-" * len(header))
    out_rows = []
    for (op, n, nbytes) in sorted(table, key=lambda k: (k[1], k[0], k[2])):
        r = table[(op, n, nbytes)]
        d, t, m = r.get("distkit"), r.get("torch_gloo"), r.get("openmpi")
        dm = r.get("distkit_mpi")

        def cell(us, ref=None):
            if us is None:
                return f"{'n/a':>10}{'':>7}" + ("" if ref is None else f"{'':>7}")
            s = f"{us:>10.1f}{busbw(op, n, nbytes, us):>7.2f}"
            if ref is not None:
                s += f"{(us / ref if ref else 0):>7.2f}"
            return s

        print(f"{op:<15}{n:>2}{human(nbytes):>9} | {d if d is None else d:>11.1f}"
              f"{busbw(op, n, nbytes, d or 0):>7.2f} | {cell(t, d)} | {cell(m, d)} | "
              f"{(f'{dm:>10.1f}{busbw(op, n, nbytes, dm):>7.2f}{(m / dm if m else 0):>7.2f}' if dm else 'n/a'):>24}"
              if d is not None else f"{op:<15}{n:>2}{human(nbytes):>9} | {'n/a':>11}")
        out_rows.append([op, n, nbytes, d, t, m,
                         busbw(op, n, nbytes, d or 0), busbw(op, n, nbytes, t or 0),
                         busbw(op, n, nbytes, m or 0),
                         (t / d) if (t and d) else "", (m / d) if (m and d) else "",
                         dm if dm is not None else "", busbw(op, n, nbytes, dm or 0)])
    print("ratio = peer time / distkit time (> 1: distkit faster); mpi/it = OpenMPI time / "
          "distkit-on-mpi time; busbw in GB/s")
    print_memcpy_bound(table, memcpy_us, busbw)
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["op", "world_size", "bytes", "distkit_us", "torch_gloo_us", "openmpi_us",
                        "distkit_busbw", "torch_gloo_busbw", "openmpi_busbw",
                        "torch_over_distkit", "openmpi_over_distkit",
                        "distkit_mpi_us", "distkit_mpi_busbw"])
            w.writerows(out_rows)
    if args.png:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        keys = sorted({(op, n) for (op, n, _) in table})
        fig, axes = plt.subplots(len(keys), 1, figsize=(8, 3.2 * len(keys)), squeeze=False)
        for ax, (op, n) in zip(axes[:, 0], keys):
            for impl, label in (("distkit", "distkit (gloo)"), ("torch_gloo", "torch.distributed gloo"),
                                ("openmpi", "OpenMPI")):
                pts = sorted((b, busbw(op, n, b, table[(op, n, b)][impl]))
                             for (o, k, b) in table if o == op and k == n and impl in table[(o, k, b)])
                if pts:
                    ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=label)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(f"{op}, world size {n}")
            ax.set_xlabel("bytes")
            ax.set_ylabel("busbw (GB/s)")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend()
        fig.tight_layout()
        fig.savefig(args.png, dpi=100)


if __name__ == "__main__":
    main()
