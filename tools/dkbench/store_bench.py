"""Store round trips per second: distkit's gRPC store beside torch's TCPStore,
measured in the same run, for set / get / add from 1, 8 and 64 clients.

    bazel run //tools/dkbench:store_bench [-- --ops 2000 --clients 1,8,64 --csv out.csv]

Both stores are hosted in the measuring process, as TCPStore's master is. The
distkit clients are threads of a C++ program; the torch clients are threads
(1 client) or processes (more clients, so the GIL cannot serialize them).
torch's set does not wait for an answer, and neither does distkit's (both
stores apply one connection's requests in order).
"""
import argparse
import csv
import multiprocessing as mp
import os
import subprocess
import sys
import time
from datetime import timedelta


def _find_client() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    for candidate in (os.path.join(here, "store_bench_client"),
                      os.path.join(os.environ.get("RUNFILES_DIR", ""), "distkit/tools/dkbench/store_bench_client")):
        if os.path.exists(candidate):
            return candidate
    sys.exit("store_bench_client not found; run through bazel run //tools/dkbench:store_bench")


def _torch_worker(port: int, op: str, ops: int, index: int, result_queue) -> None:
    import torch.distributed as dist
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=60))
    key = f"key{index}"
    store.set(key, "value-of-some-bytes")
    result_queue.put("ready")
    start_flag = store.get("go")
    del start_flag
    t0 = time.perf_counter()
    for _ in range(ops):
        if op == "set":
            store.set(key, "value-of-some-bytes")
        elif op == "get":
            store.get(key)
        else:
            store.add("counter", 1)
    result_queue.put(time.perf_counter() - t0)


def torch_ops_per_second(op: str, clients: int, ops: int) -> float:
    import torch.distributed as dist
    master = dist.TCPStore("127.0.0.1", 0, is_master=True, timeout=timedelta(seconds=60))
    port = master.port
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_torch_worker, args=(port, op, ops, i, queue)) for i in range(clients)]
    for p in procs:
        p.start()
    for _ in procs:
        queue.get()
    t0 = time.perf_counter()
    master.set("go", "1")
    for _ in procs:
        queue.get()
    wall = time.perf_counter() - t0
    for p in procs:
        p.join()
    return clients * ops / wall


def distkit_ops_per_second(client: str, op: str, clients: int, ops: int) -> float:
    out = subprocess.run([client, "--op", op, "--clients", str(clients), "--ops", str(ops)],
                         check=True, capture_output=True, text=True).stdout.split()
    return float(out[2])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=2000, help="calls per client")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved runs; the median is kept")
    parser.add_argument("--clients", default="1,8,64", help="client counts, comma-separated")
    parser.add_argument("--csv", default="", help="also write the table here")
    args = parser.parse_args()
    client = _find_client()
    rows = []
    print(f"{'op':<5}{'clients':>8}{'distkit ops/s':>15}{'TCPStore ops/s':>16}{'ratio':>8}")
    for op in ("set", "get", "add"):
        for clients in [int(c) for c in args.clients.split(",")]:
            ours, theirs = [], []
            for _ in range(args.repeats):  # interleaved, so both see the same noise
                ours.append(distkit_ops_per_second(client, op, clients, args.ops))
                # Fewer calls per torch client: each is a Python process.
                theirs.append(torch_ops_per_second(op, clients, max(50, args.ops // min(clients, 16))))
            a, b = sorted(ours)[len(ours) // 2], sorted(theirs)[len(theirs) // 2]
            rows.append((op, clients, a, b, a / b))
            print(f"{op:<5}{clients:>8}{a:>15.0f}{b:>16.0f}{a / b:>8.2f}", flush=True)
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["op", "clients", "distkit_ops_per_s", "tcpstore_ops_per_s", "ratio"])
            w.writerows(rows)


if __name__ == "__main__":
    main()
