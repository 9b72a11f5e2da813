"""One rank of the sharded-training benchmark (fsdp_bench.py runs it): the
DDP benchmark's 4-layer MLP (~26M float32 parameters, batch 32, SGD with
momentum) under distkit's DDP or distkit.fsdp with one unit per layer. Rank
0 prints the median step time and this rank's memory: the bytes of model
state it holds at peak (parameters, gradients, optimizer state, and for FSDP
the gathered full parameters) and its peak RSS, and for FSDP how the last
step's all-gathers overlapped compute (fsdp.prefetch_overlap of the
model's timeline)."""
import argparse
import resource
import statistics

import torch

from ddp_bench_worker import WARMUP, mlp, timed_steps  # the same model and steps


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--impl", required=True,
                        choices=["ddp", "FULL_SHARD", "FULL_SHARD+prefetch", "SHARD_GRAD_OP",
                                 "NO_SHARD"])
    impl = parser.parse_args().impl
    torch.set_num_threads(1)
    net = mlp()
    total = sum(p.numel() * p.element_size() for p in net.parameters())
    largest = max(sum(p.numel() * p.element_size() for p in layer.parameters()) for layer in net)
    from distkit import dist, fsdp
    from distkit.model import MMDistributedDataParallel
    dist.init_dist("pytorch", backend="gloo")
    if impl == "ddp":
        model = MMDistributedDataParallel(net)
        params = list(net.parameters())
    else:
        prefetch = impl.endswith("+prefetch")
        model = fsdp.FullyShardedDataParallel(
            net, sharding_strategy=fsdp.ShardingStrategy[impl.split("+")[0]],
            auto_wrap_policy=fsdp.ModuleWrapPolicy({torch.nn.Linear}),
            backward_prefetch=fsdp.BackwardPrefetch.BACKWARD_PRE if prefetch else None,
            forward_prefetch=prefetch)
        params = list(model.parameters())
    sgd = torch.optim.SGD(params, lr=0.01, momentum=0.9)

    def before_step(step):
        if impl == "ddp":
            return
        if step == WARMUP:
            fsdp.reset_peak_memory_stats()
        model.take_timeline()  # only the last step's is kept

    times = timed_steps(model, sgd, before_step)
    optim_bytes = sum(s["momentum_buffer"].numel() * 4 for s in sgd.state.values()
                      if s.get("momentum_buffer") is not None)
    if impl == "ddp":
        state = 2 * total + optim_bytes  # parameters and gradients, full on every rank
    else:
        state = fsdp.memory_stats()["held_peak"] + optim_bytes
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    overlap = ""
    if impl != "ddp":
        o = fsdp.prefetch_overlap(model.take_timeline())
        overlap = f" overlap={o['overlapped']}/{o['gathers']}/{o['overlap_ns'] / 1e6:.0f}"

    if dist.get_rank() == 0:
        print(f"RESULT impl={impl} total={total} largest={largest} "
              f"median_ms={statistics.median(times):.1f} state_bytes={state} rss={rss}{overlap}",
              flush=True)
    dist.destroy()


if __name__ == "__main__":
    main()
