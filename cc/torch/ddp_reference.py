"""torch.nn.parallel.DistributedDataParallel (Gloo) on the models, data and
modes of ddp_multirank_test.cc, then a comparison of every parameter and buffer with
the files ddp_multirank_test wrote: within 1e-6 relative (to each tensor's largest
magnitude) in float32 (1e-3 with the fp16
hook). Run by distrun in every rank: python3 ddp_reference.py CPP_OUT_DIR.
torch.distributed listens on MASTER_PORT + 1 (distrun's store has
MASTER_PORT)."""
import os
import sys

import torch
import torch.distributed as tdist
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

RANK = int(os.environ["RANK"])
MODES = ["plain", "find_unused", "no_sync", "bucket_view", "bn", "fp16", "separate"]


class Net(torch.nn.Module):
    def __init__(self, mode):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        if mode == "bn":
            self.bn = torch.nn.BatchNorm1d(16)
        self.fc2 = torch.nn.Linear(16, 4)
        if mode == "find_unused":
            self.extra = torch.nn.Linear(16, 4)
            self.never = torch.nn.Linear(4, 4)
        self.mode = mode

    def forward(self, x):
        h = self.fc1(x)
        if self.mode == "bn":
            h = self.bn(h)
        h = torch.relu(h)
        out = self.fc2(h)
        if self.mode == "find_unused" and RANK % 2 == 1:
            out = out + self.extra(h)
        return out


def init(m):
    with torch.no_grad():
        for i, p in enumerate(m.parameters()):
            v = 0.3 * torch.sin(torch.arange(p.numel(), dtype=torch.float32) * 0.37 + i)
            p.copy_(v.reshape(p.shape) + RANK)


def inp(step, micro):
    return torch.sin(torch.arange(48, dtype=torch.float32).reshape(6, 8) * 0.3
                     + (RANK + 0.7 * step + 0.11 * micro))


def target(step, micro):
    return torch.cos(torch.arange(24, dtype=torch.float32).reshape(6, 4) * 0.2
                     + (RANK - 0.3 * step + 0.05 * micro))


def train(mode):
    torch.manual_seed(0)
    net = Net(mode)
    init(net)
    sgd = torch.optim.SGD(net.parameters(), lr=0.1)
    loss_of = lambda model, s, m: F.mse_loss(model(inp(s, m)), target(s, m))
    if mode == "separate":
        net.fc1 = DDP(net.fc1)
        net.fc2 = DDP(net.fc2)
        model = net
    else:
        model = DDP(net, find_unused_parameters=(mode == "find_unused"),
                    gradient_as_bucket_view=(mode == "bucket_view"))
        if mode == "fp16":
            model.register_comm_hook(None, default_hooks.fp16_compress_hook)
    for step in range(5):
        sgd.zero_grad()
        if mode == "no_sync":
            with model.no_sync():
                loss_of(model, step, 1).backward()
        loss_of(model, step, 0).backward()
        sgd.step()
    if mode == "separate":
        net.fc1, net.fc2 = net.fc1.module, net.fc2.module
    state = {k: v for k, v in net.named_parameters()}
    state.update({k: v for k, v in net.named_buffers() if v.dtype == torch.float32})
    return state


def read(path):
    out = {}
    with open(path) as f:
        for line in f:
            name, *values = line.split()
            out[name] = torch.tensor([float(v) for v in values], dtype=torch.float32)
    return out


def main():
    # A FileStore in the test's temporary directory: distrun's store holds
    # MASTER_PORT, and no other port is sure to be free while tests run.
    store = f"file://{os.environ.get('TEST_TMPDIR', '/tmp')}/torch_store_{os.environ['MASTER_PORT']}"
    tdist.init_process_group("gloo", init_method=store,
                             rank=RANK, world_size=int(os.environ["WORLD_SIZE"]))
    torch.set_num_threads(1)
    worst = 0.0
    for mode in MODES:
        ref = train(mode)
        got = read(os.path.join(sys.argv[1], f"cpp_{mode}_rank{RANK}.txt"))
        assert set(ref) == set(got), f"{mode}: names differ: {sorted(ref)} vs {sorted(got)}"
        tol = 1e-3 if mode == "fp16" else 1e-6
        for name, r in ref.items():
            r = r.detach().flatten()
            g = got[name]
            # Relative to the tensor's largest magnitude: summation order
            # across ranks differs from Gloo's ring by an ulp, and an element
            # near zero would turn that into a large element-wise ratio.
            rel = ((g - r).abs().max() / r.abs().max().clamp(min=1e-12)).item()
            worst = max(worst, rel) if mode != "fp16" else worst
            if rel > tol:
                print(f"rank {RANK}: {mode} {name}: max relative difference {rel:.3g} > {tol}\n"
                      f"  distkit {g[:6].tolist()}\n  torch   {r[:6].tolist()}", file=sys.stderr)
                sys.exit(1)
    print(f"rank {RANK}: every mode equals torch DDP (worst relative difference {worst:.2g})")
    tdist.destroy_process_group()


if __name__ == "__main__":
    main()
