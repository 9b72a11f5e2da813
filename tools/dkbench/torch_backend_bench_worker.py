"""One rank of torch_backend_bench.py: torch.distributed's default group on
"distkit" (made by distkit.dist.init_dist) beside a torch Gloo group over the
same ranks, in one job. Rank 0 prints, for each size, the median time of
torch.distributed.all_reduce through each, and the median step of torch's
own DistributedDataParallel (the DDP benchmark's MLP) on each."""
import statistics
import time

import torch
import torch.distributed as tdist

from ddp_bench_worker import BATCH, STEPS, WARMUP, WIDTH, mlp


def timed(fn, iters):
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    from distkit import dist
    torch.set_num_threads(1)
    dist.init_dist("pytorch", backend="gloo")
    gloo = tdist.new_group(backend="gloo")
    rank, n = tdist.get_rank(), tdist.get_world_size()
    for nbytes in (4, 65536, 1 << 20, 16 << 20):
        count = max(1, nbytes // 4)
        a = torch.ones(count)
        iters = max(5, min(200, 50_000_000 // nbytes))
        for name, group in (("distkit", None), ("gloo", gloo)):
            for _ in range(3):
                tdist.all_reduce(a, group=group)
            us = timed(lambda: tdist.all_reduce(a, group=group), iters) * 1e6
            if rank == 0:
                print(f"RESULT all_reduce backend={name} bytes={nbytes} us={us:.1f}", flush=True)
    x, y = torch.randn(BATCH, WIDTH), torch.randn(BATCH, WIDTH)
    for name, group in (("distkit", None), ("gloo", gloo)):
        torch.manual_seed(0)
        model = torch.nn.parallel.DistributedDataParallel(mlp(), process_group=group)
        sgd = torch.optim.SGD(model.parameters(), lr=0.01)
        times = []
        for step in range(WARMUP + STEPS):
            t0 = time.perf_counter()
            sgd.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            sgd.step()
            if step >= WARMUP:
                times.append((time.perf_counter() - t0) * 1e3)
        if rank == 0:
            print(f"RESULT ddp backend={name} ms={statistics.median(times):.1f}", flush=True)
    dist.destroy()


if __name__ == "__main__":
    main()
