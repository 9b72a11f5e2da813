"""distkit.elastic's ElasticSampler with global batches that have fewer
indices than ranks, under DDP (MMDistributedDataParallel) or, with the
argument "fsdp", FullyShardedDataParallel (FULL_SHARD, one unit per Linear):
9 samples in global batches of 4 with drop_last=False end each epoch with a
batch of one sample, so at world sizes 2 and 3 every rank but rank 0 gets an
empty share there. Trained through elastic.run with the package's recipe
(``loss = sampler.weighted_loss(per-sample losses)``, every rank running the
forward and backward), every step's loss must be finite on every rank, the
ranks' average loss must be the global batch's mean loss, and the job must
end with the parameters of plain torch's one-process run of the same
schedule (full-batch mean loss, SGD with momentum), computed here without
distkit. With the old recipe (mean loss * loss_weight()) the empty share's
loss is NaN, and so is the averaged loss on every rank. Float64; 1e-9
relative, since the all_reduce sums in another order."""
import sys

import torch

from distkit import dist, elastic
from distkit.fsdp import FullyShardedDataParallel, ModuleWrapPolicy, ShardingStrategy
from distkit.model import MMDistributedDataParallel
from testing.python.rank_check import check, finish

SAMPLES, FEATURES, HIDDEN, GLOBAL_BATCH, EPOCHS = 9, 5, 16, 4, 2
LR, MOMENTUM, SEED, TIMEOUT = 0.05, 0.9, 11, 20


def data():
    g = torch.Generator().manual_seed(4321)
    x = torch.randn(SAMPLES, FEATURES, generator=g, dtype=torch.float64)
    return x, torch.cos(x @ torch.linspace(-1, 1, FEATURES, dtype=torch.float64)).unsqueeze(1)


def make_net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, HIDDEN), torch.nn.Tanh(),
                               torch.nn.Linear(HIDDEN, 1)).double()


def reference(x, y):
    """Plain torch, one process: the parameters and every step's loss."""
    net = make_net()
    opt = torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM)
    losses = []
    for epoch in range(EPOCHS):
        order = torch.randperm(SAMPLES, generator=torch.Generator().manual_seed(SEED + epoch))
        for start in range(0, SAMPLES, GLOBAL_BATCH):
            idx = order[start:start + GLOBAL_BATCH]
            opt.zero_grad()
            loss = ((net(x[idx]) - y[idx]) ** 2).mean()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return [p.detach().clone() for p in net.parameters()], losses


def main():
    fsdp = "fsdp" in sys.argv[1:]
    dist.init_dist("pytorch", backend="gloo", timeout=TIMEOUT)
    rank, size = dist.get_rank(), dist.get_world_size()
    x, y = data()
    if fsdp:
        model = FullyShardedDataParallel(make_net(), sharding_strategy=ShardingStrategy.FULL_SHARD,
                                         auto_wrap_policy=ModuleWrapPolicy({torch.nn.Linear}))
    else:
        model = MMDistributedDataParallel(make_net())
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    sampler = elastic.ElasticSampler(SAMPLES, GLOBAL_BATCH, shuffle=True, seed=SEED,
                                     drop_last=False)
    state = elastic.State(model=model, optimizer=opt, sampler=sampler, epoch=0)
    logged, empty = [], [0]

    def train(state):
        while state.epoch < EPOCHS:
            for indices in state.sampler:
                empty[0] += not indices
                idx = torch.tensor(indices, dtype=torch.long)
                opt.zero_grad()
                per_sample = (model(x[idx]) - y[idx]) ** 2
                loss = state.sampler.weighted_loss(per_sample)
                check(torch.isfinite(loss).item(),
                      f"step {len(logged)}: share {indices}, loss {loss.item()}")
                loss.backward()
                opt.step()
                average = loss.detach().clone()
                dist.all_reduce(average)
                logged.append(average.item() / size)
            state.epoch += 1
            state.sampler.set_epoch(state.epoch)
            state.commit()

    elastic.run(train, state, settle=2.0)
    want, want_losses = reference(x, y)
    batches = EPOCHS * len(sampler)
    # The last batch of each epoch (one sample) leaves every rank but 0 empty.
    check(empty[0] == (EPOCHS if rank > 0 else 0), f"rank {rank}: {empty[0]} empty shares")
    check(len(logged) == batches == len(want_losses), f"{len(logged)} steps of {batches}")
    for step, (got, ref) in enumerate(zip(logged, want_losses)):
        check(abs(got - ref) <= 1e-9 * abs(ref),
              f"step {step}: the ranks' average loss {got} is the global batch's {ref}")
    if fsdp:
        full = model.state_dict()  # FULL_STATE_DICT: collective
        got = [full[k] for k, _ in make_net().named_parameters()]
    else:
        got = [p.detach() for p in model.module.parameters()]
    for i, (g, w) in enumerate(zip(got, want)):
        check(torch.allclose(g, w, rtol=1e-9, atol=1e-12),
              f"parameter {i} equals the one-process run's: max diff {(g - w).abs().max().item()}")
    return finish(("FSDP" if fsdp else "DDP") + ": empty shares trained as the global batch")


if __name__ == "__main__":
    sys.exit(main())
