"""torch.distributed (Gloo) side of dkbench; same sizes and timing rules as
collective_bench.cc. Launched by distrun; torch's own TCPStore listens on
MASTER_PORT + 1 (distrun's store holds MASTER_PORT). Rank 0 prints
    torch_gloo,<op>,<world_size>,<bytes>,<microseconds per call>
reduce_scatter is skipped: torch 1.13's Gloo process group does not implement it.
"""
import argparse
import os
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
    addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]) + 1
    dist.init_process_group("gloo", init_method=f"tcp://{addr}:{port}", rank=rank, world_size=world)
    for op in args.ops.split(","):
        nbytes = args.min_bytes
        while nbytes <= args.max_bytes:
            count = max(1, nbytes // 4)
            part = max(1, count // world)
            if op in ("all_reduce", "broadcast"):
                a = torch.ones(count)
                fn = (lambda: dist.all_reduce(a)) if op == "all_reduce" else (lambda: dist.broadcast(a, 0))
            elif op == "all_gather":
                a = torch.ones(part)
                outs = [torch.empty(part) for _ in range(world)]
                fn = lambda: dist.all_gather(outs, a)
            else:
                raise SystemExit(f"unsupported op {op}")
            if args.touch == "1":
                outputs = outs if op == "all_gather" else [a]
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
            nbytes *= 4
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
