"""Per-call cost of a 4-byte all_reduce from Python: distkit (mmengine's
all_reduce, and the raw group call) beside torch.distributed (Gloo), in the
same processes, interleaved, at world sizes 1 and 2.

    bazel run //tools/dkbench:python_overhead_bench

At world size 1 mmengine's all_reduce returns at once (nothing to reduce), so
the raw group call is the one that measures the binding's overhead there.
"""
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def worker(iters: int, batches: int) -> None:
    import torch
    import torch.distributed as tdist

    from distkit import _lib, dist
    from distkit._dlpack import Borrowed

    # torch's own Gloo first: init_dist then leaves torch's default group alone.
    tdist.init_process_group(
        "gloo", init_method=f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
        rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
    dist.init_dist("pytorch", backend="gloo", timeout=120)
    rank, n = dist.get_dist_info()
    x = torch.ones(1)
    handle = dist.groups.handle_of(None)  # distkit's default group (NULL)

    def raw():
        view = Borrowed(x)
        _lib.raise_for_status(_lib.lib.dk_group_all_reduce, handle, view.pointer, 0, None)

    calls = {"distkit dist.all_reduce": lambda: dist.all_reduce(x),
             "distkit group call (ABI)": raw,
             "torch.distributed.all_reduce": lambda: tdist.all_reduce(x)}
    results = {name: [] for name in calls}
    for _ in range(batches):
        for name, fn in calls.items():  # interleaved
            for _ in range(20):
                fn()
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(iters):
                fn()
            results[name].append((time.perf_counter() - t0) * 1e6 / iters)
    if rank == 0:
        base = statistics.median(results["torch.distributed.all_reduce"])
        for name, values in results.items():
            us = statistics.median(values)
            print(f"RESULT world={n} {name:<30} {us:9.1f} us/call   torch/this = {base / us:6.2f}")
    tdist.destroy_process_group()
    dist.destroy()


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(int(sys.argv[2]), int(sys.argv[3]))
        return
    distrun = os.path.join(HERE, "..", "distrun", "distrun")
    for n in (1, 2):
        out = subprocess.run([distrun, "--nproc-per-node", str(n), "--master-port", "0", "--",
                              "/usr/bin/python3", os.path.abspath(__file__), "--worker", "300", "7"],
                             capture_output=True, text=True, timeout=600,
                             env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
        lines = [l.split("RESULT ", 1)[1] for l in out.stdout.splitlines() if "RESULT " in l]
        print("\n".join(lines) if lines else out.stdout + out.stderr)


if __name__ == "__main__":
    main()
