"""torch.distributed (Gloo) side of dkbench; same sizes and timing rules as
collective_bench.cc. Launched by distrun; torch's own TCPStore listens on
MASTER_PORT (distrun leaves it free: its own store is DISTKIT_STORE). Rank 0 prints
    torch_gloo,<op>,<world_size>,<bytes>,<microseconds per call>
--ops: all_reduce, all_gather, broadcast, gather, scatter, reduce,
all_to_all, barrier (0 bytes), and reduce_scatter where torch's Gloo has
it (from torch 2; skipped on torch 1.13's, saying so).
"""
import argparse
import os
import sys
import statistics
import time

import torch
import torch.distributed as dist


def iters_for(nbytes: int) -> int:
    return max(5, min(200, 50_000_000 // max(nbytes, 1)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ops", default="all_reduce,all_gather,broadcast")
    parser.add_argument("--min-bytes", type=int, default=4)
    parser.add_argument("--max-bytes", type=int, default=64 << 20)
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument("--touch", default="0",
                        help="1: each call also writes its input before and reads its output after")
    args = parser.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    dist.init_process_group("gloo", init_method=f"tcp://{addr}:{port}", rank=rank, world_size=world)
    for op in args.ops.split(","):
        if op == "reduce_scatter" and int(torch.__version__.split(".")[0]) < 2:
            # torch 1.13's Gloo has none: left out of the table (n/a).
            if rank == 0:
                print(f"torch_bench: torch {torch.__version__}'s Gloo has no reduce_scatter; "
                      "skipped", file=sys.stderr, flush=True)
            continue
        # A barrier moves no data: one size, printed as 0 bytes.
        nbytes = 0 if op == "barrier" else args.min_bytes
        while nbytes <= (0 if op == "barrier" else args.max_bytes):
            count = max(1, nbytes // 4)
            part = max(1, count // world)
            outs = None
            if op in ("all_reduce", "broadcast", "reduce"):
                a = torch.ones(count)
                fn = {"all_reduce": lambda: dist.all_reduce(a),
                      "broadcast": lambda: dist.broadcast(a, 0),
                      "reduce": lambda: dist.reduce(a, 0)}[op]
            elif op == "all_gather":
                a = torch.ones(part)
                outs = [torch.empty(part) for _ in range(world)]
                fn = lambda: dist.all_gather(outs, a)
            elif op == "gather":
                a = torch.ones(part)
                outs = [torch.empty(part) for _ in range(world)] if rank == 0 else None
                fn = lambda: dist.gather(a, outs, dst=0)
            elif op == "scatter":
                a = torch.empty(part)
                ins = [torch.ones(part) for _ in range(world)] if rank == 0 else None
                fn = lambda: dist.scatter(a, ins, src=0)
            elif op == "reduce_scatter":
                a = torch.ones(part * world)
                out = torch.empty(part)
                outs = [out]
                fn = lambda: dist.reduce_scatter_tensor(out, a)
            elif op == "all_to_all":
                a = torch.ones(part * world)
                out = torch.empty(part * world)
                outs = [out]
                fn = lambda: dist.all_to_all_single(out, a)
            elif op == "barrier":
                a = torch.ones(1)
                fn = dist.barrier
            else:
                raise SystemExit(f"unsupported op {op}")
            if args.touch == "1":
                outputs = outs or [a]
                call = fn

                def fn(call=call, a=a, outputs=outputs):
                    a.fill_(1.0)
                    call()
                    for t in outputs:
                        float(t.sum())
            iters = iters_for(nbytes)
            for _ in range(3):
                fn()
            per_call = []
            for _ in range(args.batches):
                dist.barrier()
                t0 = time.perf_counter()
                for _ in range(iters):
                    fn()
                per_call.append((time.perf_counter() - t0) * 1e6 / iters)
            median = torch.tensor([statistics.median(per_call)], dtype=torch.float64)
            dist.all_reduce(median, op=dist.ReduceOp.MAX)
            if rank == 0:
                print(f"torch_gloo,{op},{world},{nbytes},{median.item():.3f}", flush=True)
            nbytes = nbytes * 4 if nbytes else 1  # a barrier's one size ends the loop
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
