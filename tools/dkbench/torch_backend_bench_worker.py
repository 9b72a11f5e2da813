"""One rank of torch_backend_bench.py: torch.distributed's default group on
"distkit" (made by distkit.dist.init_dist; the C++ backend unless the
extension cannot load) beside a torch Gloo group over the same ranks, in
one job. Rank 0 prints RESULT lines:

- all_reduce: the median time of torch.distributed.all_reduce through each
  group, per size; for 4 bytes also distkit.dist.all_reduce, in alternating
  rounds (the median of the rounds' medians).
- ddp: torch's own DistributedDataParallel step (the DDP benchmark's MLP,
  the same model and data) on each group, and the same step without DDP
  (mode=local), one step of each per round in rotating order (the median
  over rounds); the exposed communication is a round's DDP step minus its
  local step (the median over rounds).
- bucket: one step of each DDP with a communication hook that does what
  torch's default hook does (all_reduce, then divide) and notes when each
  bucket's all_reduce was issued and completed, against when backward
  computed its last gradient (the first layer's weight): evidence that the
  all_reduces run during backward.
"""
import argparse
import os
import statistics
import threading
import time

import torch
import torch.distributed as tdist

from ddp_bench_worker import BATCH, WIDTH, mlp  # noqa: F401 - BATCH: --batch's default


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def timed(fn, iters):
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def rotated(items, k):
    k %= len(items)
    return items[k:] + items[:k]


def latency(gloo, rank, rounds):
    from distkit import dist
    for nbytes in (4, 65536, 1 << 20, 16 << 20):
        a = torch.ones(max(1, nbytes // 4))
        iters = max(5, min(2000, 50_000_000 // nbytes))
        ways = {
            "distkit": lambda: tdist.all_reduce(a),
            "gloo": lambda: tdist.all_reduce(a, group=gloo),
        }
        if nbytes == 4:
            ways["distkit.dist"] = lambda: dist.all_reduce(a)
        per_round = {name: [] for name in ways}
        for r in range(rounds if nbytes <= 65536 else 1):
            for name in rotated(list(ways), r):
                fn = ways[name]
                for _ in range(3):
                    fn()
                n = iters if name != "gloo" else max(5, iters // 5)
                per_round[name].append(timed(fn, n) * 1e6)
        if rank == 0:
            for name, values in per_round.items():
                print(f"RESULT all_reduce backend={name} bytes={nbytes} "
                      f"us={statistics.median(values):.2f}", flush=True)


def ddp_models(gloo, bucket_view):
    """The same model and optimizer three times: alone, DDP on distkit, DDP
    on Gloo (both with gradient_as_bucket_view=`bucket_view`)."""
    models = {}
    for name, group in (("local", None), ("distkit", None), ("gloo", gloo)):
        net = mlp()  # seeded: the same parameters everywhere
        model = net if name == "local" else torch.nn.parallel.DistributedDataParallel(
            net, process_group=group, gradient_as_bucket_view=bucket_view)
        models[name] = (model, torch.optim.SGD(net.parameters(), lr=0.01))
    return models


def step(model, sgd, x, y):
    sgd.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    sgd.step()


def thread_cpu_ms():
    """(this thread's CPU ms, every other thread's of the process)."""
    me = threading.get_native_id()
    mine = others = 0.0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended
            continue
        ms = (int(fields[11]) + int(fields[12])) * 1000.0 / CLOCK_TICKS
        if int(tid) == me:
            mine += ms
        else:
            others += ms
    return mine, others


def ddp(models, rank, rounds, x, y):
    """Alternating single steps (a round: one step of each, the order
    rotating), so every mode meets the machine's other load alike; a
    backend's exposed communication is its step minus the local step of the
    same round. Each mode's CPU time per step is noted too, this thread's
    (backward, DDP's bucket copies) and the process's other threads'
    (communication): on a shared machine it varies less than wall time."""
    for model, sgd in models.values():
        for _ in range(2):  # warm-up: caches, the first step's bucket rebuild
            step(model, sgd, x, y)
    per_round = {name: [] for name in models}
    cpu = {name: [0.0, 0.0] for name in models}
    for r in range(rounds):
        for name in rotated(list(models), r):
            model, sgd = models[name]
            mine0, others0 = thread_cpu_ms()
            t0 = time.perf_counter()
            step(model, sgd, x, y)
            per_round[name].append((time.perf_counter() - t0) * 1e3)
            mine1, others1 = thread_cpu_ms()
            cpu[name][0] += (mine1 - mine0) / rounds
            cpu[name][1] += (others1 - others0) / rounds
    if rank == 0:
        for name, values in per_round.items():
            print(f"RESULT ddp mode={name} ms={statistics.median(values):.2f} "
                  f"cpu_main_ms={cpu[name][0]:.1f} cpu_others_ms={cpu[name][1]:.1f}",
                  flush=True)
        for name in ("distkit", "gloo"):
            exposed = [d - l for d, l in zip(per_round[name], per_round["local"])]
            print(f"RESULT exposed backend={name} ms={statistics.median(exposed):.2f}",
                  flush=True)


def bucket_timeline(models, rank, n, x, y):
    """One step of each DDP with a hook that notes each bucket's all_reduce."""
    for name in ("distkit", "gloo"):
        model, sgd = models[name]
        group = model.process_group
        events = []

        def hook(state, bucket, events=events, group=group):
            issued = time.perf_counter()
            fut = tdist.all_reduce(bucket.buffer(), group=group, async_op=True).get_future()

            def done(f):
                events.append((bucket.index(), issued, time.perf_counter()))
                return f.value()[0].div_(n)
            return fut.then(done)

        # A fresh DDP over the same module: the timed one keeps its default hook.
        timeline = torch.nn.parallel.DistributedDataParallel(model.module, process_group=group)
        timeline.register_comm_hook(None, hook)
        last_grad = []
        handle = model.module[0].weight.register_hook(
            lambda g: last_grad.append(time.perf_counter()) or g)
        for _ in range(2):  # the second step runs on rebuilt buckets
            events.clear()
            last_grad.clear()
            sgd.zero_grad()
            loss = torch.nn.functional.mse_loss(timeline(x), y)
            t0 = time.perf_counter()
            loss.backward()
            t1 = time.perf_counter()
        handle.remove()
        if rank == 0:
            for index, issued, completed in sorted(events):
                print(f"RESULT bucket backend={name} index={index} issued_ms="
                      f"{(issued - t0) * 1e3:.1f} done_ms={(completed - t0) * 1e3:.1f} "
                      f"last_grad_ms={(last_grad[0] - t0) * 1e3:.1f} "
                      f"backward_ms={(t1 - t0) * 1e3:.1f}", flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ddp-rounds", type=int, default=15)
    parser.add_argument("--batch", type=int, default=BATCH)
    parser.add_argument("--bucket-view", action="store_true")
    args = parser.parse_args()
    from distkit import dist, torch_backend
    torch.set_num_threads(1)
    dist.init_dist("pytorch", backend="gloo")
    gloo = tdist.new_group(backend="gloo")
    rank, n = tdist.get_rank(), tdist.get_world_size()
    if rank == 0:
        impl, why = torch_backend.implementation()
        print(f"RESULT backend impl={impl}" + (f" (fallback: {why})" if why else ""),
              flush=True)
    latency(gloo, rank, args.rounds)
    x, y = torch.randn(args.batch, WIDTH), torch.randn(args.batch, WIDTH)
    models = ddp_models(gloo, args.bucket_view)
    ddp(models, rank, args.ddp_rounds, x, y)
    bucket_timeline(models, rank, n, x, y)
    dist.destroy()


if __name__ == "__main__":
    main()
