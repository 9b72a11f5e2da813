"""One rank of the DDP step benchmark (ddp_bench.py runs it): the same 4-layer
MLP, batch and optimizer as ddp_bench_cc.cc, with distkit's Python DDP
(--impl distkit) or torch's DistributedDataParallel over Gloo (--impl torch,
on MASTER_PORT, which distrun leaves free). Rank 0 prints the median step time."""
import argparse
import os
import statistics
import time

import torch
import torch.nn.functional as F

WIDTH, BATCH, WARMUP, STEPS = 2560, 32, 3, 10


def mlp() -> torch.nn.Sequential:
    """The benchmark model: 4 Linear layers of WIDTH (ReLU between), seed 0."""
    torch.manual_seed(0)
    layers = []
    for i in range(4):
        layers.append(torch.nn.Linear(WIDTH, WIDTH))
        if i < 3:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def timed_steps(model, sgd, before_step=lambda step: None):
    """WARMUP + STEPS training steps on one random batch; the times (ms) of
    the last STEPS. before_step(step) runs ahead of each, untimed."""
    x, y = torch.randn(BATCH, WIDTH), torch.randn(BATCH, WIDTH)
    times = []
    for step in range(WARMUP + STEPS):
        before_step(step)
        t0 = time.perf_counter()
        sgd.zero_grad()
        F.mse_loss(model(x), y).backward()
        sgd.step()
        if step >= WARMUP:
            times.append((time.perf_counter() - t0) * 1e3)
    return times


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--impl", choices=["distkit", "torch"], required=True)
    impl = parser.parse_args().impl
    torch.set_num_threads(1)
    net = mlp()
    if impl == "torch":
        import torch.distributed as tdist
        port = int(os.environ["MASTER_PORT"])  # distrun's store is DISTKIT_STORE
        tdist.init_process_group("gloo", init_method=f"tcp://{os.environ['MASTER_ADDR']}:{port}",
                                 rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
        model = torch.nn.parallel.DistributedDataParallel(net)
        rank = tdist.get_rank()
    else:
        from distkit import dist
        from distkit.model import MMDistributedDataParallel
        dist.init_dist("pytorch", backend="gloo")
        model = MMDistributedDataParallel(net)
        rank = dist.get_rank()
    times = timed_steps(model, torch.optim.SGD(net.parameters(), lr=0.01))
    if rank == 0:
        params = sum(p.numel() for p in net.parameters())
        name = "distkit-python" if impl == "distkit" else "torch"
        print(f"RESULT impl={name} params={params} median_ms={statistics.median(times):.1f}", flush=True)


if __name__ == "__main__":
    main()
