"""ElasticSampler's empty shares, in one process with the rank and world
size faked: a global batch with fewer indices than ranks (the last one under
drop_last=False; a global batch smaller than a grown world) leaves a rank no
sample, and the mean of its no losses is NaN, so the recipe
``mean loss * loss_weight()`` (0.0 there) gives a NaN loss (NaN gradients for
any parameter that multiplies it, a NaN logged loss on every rank).
weighted_loss(per-sample losses) is the recipe that holds there: every
rank's loss is finite, the empty share's still reaches every parameter (zero
gradients, as DDP needs), and the ranks' averaged gradients and loss equal
those of the global batch's mean, computed here independently with plain
torch (the permutation and batches rebuilt by hand); training over two
epochs at world sizes 3 and 5 ends with the parameters of the one-process
run."""
import sys

import torch

from distkit import dist
from distkit.elastic import ElasticSampler

SAMPLES, FEATURES, GLOBAL_BATCH, SEED, LR = 10, 6, 4, 3, 0.1
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print(f"CHECK FAILED: {what}", file=sys.stderr, flush=True)


def data():
    g = torch.Generator().manual_seed(99)
    x = torch.randn(SAMPLES, FEATURES, generator=g, dtype=torch.float64)
    return x, torch.sin(x.sum(dim=1, keepdim=True))


def make_net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, 8), torch.nn.Tanh(),
                               torch.nn.Linear(8, 1)).double()


def reference_batches(epoch):
    """The global batches of an epoch, drop_last=False, without the sampler."""
    g = torch.Generator().manual_seed(SEED + epoch)
    order = torch.randperm(SAMPLES, generator=g)
    return [order[i:i + GLOBAL_BATCH] for i in range(0, SAMPLES, GLOBAL_BATCH)]


class FakeWorld:
    """dist.get_rank / get_world_size answer the rank being stepped."""

    def __init__(self, world_size):
        self.world_size, self.rank = world_size, 0
        self.saved = dist.get_rank, dist.get_world_size

    def __enter__(self):
        dist.get_rank = lambda group=None: self.rank
        dist.get_world_size = lambda group=None: self.world_size
        return self

    def __exit__(self, *exc):
        dist.get_rank, dist.get_world_size = self.saved


def grads(net):
    return [p.grad.detach().clone() for p in net.parameters()]


def train(world_size, epochs):
    """Every rank's step on its own copy of the model; the gradients
    averaged over the ranks as DDP does; plain SGD. Returns the parameters
    and how many steps had an empty share."""
    x, y = data()
    nets = [make_net() for _ in range(world_size)]
    samplers = [ElasticSampler(SAMPLES, GLOBAL_BATCH, seed=SEED, drop_last=False)
                for _ in range(world_size)]
    empty_steps = 0
    with FakeWorld(world_size) as world:
        for epoch in range(epochs):
            iters = []
            for r, s in enumerate(samplers):
                s.set_epoch(epoch)
                iters.append(iter(s))
            for want in reference_batches(epoch):
                rank_grads, losses, got = [], [], []
                for r in range(world_size):
                    world.rank = r
                    indices = next(iters[r])
                    got += indices
                    idx = torch.tensor(indices, dtype=torch.long)
                    net = nets[r]
                    net.zero_grad()
                    per_sample = (net(x[idx]) - y[idx]) ** 2
                    old_recipe = per_sample.mean() * samplers[r].loss_weight()
                    loss = samplers[r].weighted_loss(per_sample)
                    check(torch.isfinite(loss).item(),
                          f"ws {world_size} rank {r} share {indices}: loss {loss.item()}")
                    if indices:
                        check(torch.allclose(loss, old_recipe, rtol=1e-14, atol=0),
                              f"ws {world_size} rank {r}: weighted_loss {loss.item()} == "
                              f"mean * loss_weight {old_recipe.item()}")
                    else:
                        empty_steps += 1
                        # Why the old recipe fails here.
                        check(torch.isnan(old_recipe).item(),
                              f"ws {world_size}: an empty share's mean * loss_weight is NaN")
                        check(loss.item() == 0.0 and loss.requires_grad,
                              f"ws {world_size} rank {r}: an empty share's loss is a zero "
                              f"connected to the model: {loss}")
                    loss.backward()
                    g = grads(net)
                    check(all(torch.isfinite(t).all().item() for t in g),
                          f"ws {world_size} rank {r}: finite gradients")
                    if not indices:
                        check(all((t == 0).all().item() for t in g),
                              f"ws {world_size} rank {r}: an empty share's gradients are 0")
                    rank_grads.append(g)
                    losses.append(loss.detach())
                check(got == want.tolist(),
                      f"ws {world_size}: the shares {got} make the global batch {want.tolist()}")
                # The global batch's mean loss and its gradients, independently.
                ref = make_net()
                ref.load_state_dict(nets[0].state_dict())
                ref_loss = ((ref(x[want]) - y[want]) ** 2).mean()
                ref_loss.backward()
                averaged = [sum(rg[i] for rg in rank_grads) / world_size
                            for i in range(len(rank_grads[0]))]
                for i, (a, w) in enumerate(zip(averaged, grads(ref))):
                    check(torch.allclose(a, w, rtol=1e-12, atol=1e-15),
                          f"ws {world_size} gradient {i}: the ranks' average equals the "
                          f"global batch's mean's: max diff {(a - w).abs().max().item()}")
                logged = sum(losses) / world_size
                check(torch.allclose(logged, ref_loss.detach(), rtol=1e-12, atol=0),
                      f"ws {world_size}: the ranks' average loss {logged.item()} is the "
                      f"global mean {ref_loss.item()}")
                with torch.no_grad():
                    for net in nets:
                        for p, a in zip(net.parameters(), averaged):
                            p -= LR * a
    return [p.detach() for p in nets[0].parameters()], empty_steps


def reference_training(epochs):
    x, y = data()
    net = make_net()
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    for epoch in range(epochs):
        for idx in reference_batches(epoch):
            opt.zero_grad()
            ((net(x[idx]) - y[idx]) ** 2).mean().backward()
            opt.step()
    return [p.detach() for p in net.parameters()]


def misuse():
    s = ElasticSampler(SAMPLES, GLOBAL_BATCH, drop_last=False)
    try:
        s.weighted_loss(torch.zeros(4))
        check(False, "weighted_loss before any share is refused")
    except RuntimeError:
        pass
    with FakeWorld(2):
        indices = next(iter(s))  # 2 of the 4
    for bad in (torch.tensor(1.0), torch.zeros(len(indices) + 1), torch.zeros(len(indices), 0)):
        try:
            s.weighted_loss(bad)
            check(False, f"weighted_loss({tuple(bad.shape)}) is refused (not per sample)")
        except ValueError:
            pass
    # Per-sample losses with more than one element each: the mean over all.
    losses = torch.arange(2 * len(indices) * 3, dtype=torch.float64).reshape(-1, 3)[:len(indices)]
    got = s.weighted_loss(losses)
    check(torch.allclose(got, losses.mean() * s.loss_weight()),
          f"(n, 3) losses: {got.item()} == mean * loss_weight")


def main():
    want = reference_training(2)
    # ws 3: the last batch (2 samples) leaves rank 2 empty; ws 5: every
    # batch leaves a rank or more empty (a small global batch after a grow).
    # (batches of 4, 4 and 2 samples: 1 + 1 + 3 empty shares an epoch).
    for world_size, want_empty in ((3, 2), (5, 10)):
        got, empty_steps = train(world_size, 2)
        check(empty_steps == want_empty,
              f"ws {world_size}: {empty_steps} empty shares, {want_empty} expected")
        for i, (g, w) in enumerate(zip(got, want)):
            check(torch.allclose(g, w, rtol=1e-12, atol=1e-14),
                  f"ws {world_size} parameter {i} equals the one-process run's: "
                  f"max diff {(g - w).abs().max().item()}")
    misuse()
    if failures:
        print(f"elastic sampler: {len(failures)} checks FAILED", flush=True)
        return 1
    print("elastic sampler: empty shares checked", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
