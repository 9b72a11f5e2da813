"""The model, data and training loop the DDP tests share: torch's DDP, the
LibTorch DDP (cc/torch/ddp_multirank_test.cc, through ddp_reference.py) and
distkit.model (bindings/python/tests/ddp_multirank_test.py) each train it for
5 SGD steps in every mode, and the results are compared parameter by
parameter. Every rank starts from different weights (the wrapper must
broadcast rank 0's) and sees different data."""
import os

import torch
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as TorchDDP

RANK = int(os.environ.get("RANK", "0"))
MODES = ["plain", "find_unused", "no_sync", "unused_no_sync", "bucket_view", "bn", "fp16",
         "separate"]


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
        if mode == "unused_no_sync":
            self.extra = torch.nn.Linear(16, 4)
        self.mode = mode
        self.in_no_sync = False  # unused_no_sync: set by train() for its no_sync micro-step

    def forward(self, x):
        h = self.fc1(x)
        if self.mode == "bn":
            h = self.bn(h)
        h = torch.relu(h)
        out = self.fc2(h)
        if self.mode == "find_unused" and RANK % 2 == 1:
            out = out + self.extra(h)
        # unused_no_sync: extra gets a gradient in the no_sync micro-step on
        # every rank, and in the synchronized one on odd ranks only: even
        # ranks must still contribute what they accumulated.
        if self.mode == "unused_no_sync" and (self.in_no_sync or RANK % 2 == 1):
            out = out + self.extra(h)
        return out


def make(mode):
    """The model for `mode`, with this rank's own starting weights."""
    torch.manual_seed(0)
    net = Net(mode)
    with torch.no_grad():
        for i, p in enumerate(net.parameters()):
            v = 0.3 * torch.sin(torch.arange(p.numel(), dtype=torch.float32) * 0.37 + i)
            p.copy_(v.reshape(p.shape) + RANK)  # DDP must replace it with rank 0's
    return net


def inp(step, micro):
    return torch.sin(torch.arange(48, dtype=torch.float32).reshape(6, 8) * 0.3
                     + (RANK + 0.7 * step + 0.11 * micro))


def target(step, micro):
    return torch.cos(torch.arange(24, dtype=torch.float32).reshape(6, 4) * 0.2
                     + (RANK - 0.3 * step + 0.05 * micro))


def torch_wrap(net, mode):
    """torch's own DDP on `net` for `mode` (Gloo)."""
    if mode == "separate":
        net.fc1, net.fc2 = TorchDDP(net.fc1), TorchDDP(net.fc2)
        return net
    model = TorchDDP(net, find_unused_parameters=mode in ("find_unused", "unused_no_sync"),
                     gradient_as_bucket_view=mode == "bucket_view")
    if mode == "fp16":
        model.register_comm_hook(None, default_hooks.fp16_compress_hook)
    return model


def train(mode, wrap):
    """5 SGD steps of make(mode) wrapped by wrap(net, mode); the float32
    parameters and buffers after them, by name (wrappers' ".module" left out)."""
    net = make(mode)
    model = wrap(net, mode)
    sgd = torch.optim.SGD(net.parameters(), lr=0.1)
    for step in range(5):
        sgd.zero_grad()
        if mode in ("no_sync", "unused_no_sync"):
            with model.no_sync():
                net.in_no_sync = True
                F.mse_loss(model(inp(step, 1)), target(step, 1)).backward()
                net.in_no_sync = False
        F.mse_loss(model(inp(step, 0)), target(step, 0)).backward()
        sgd.step()
    state = dict(net.named_parameters())
    state.update({k: v for k, v in net.named_buffers() if v.dtype == torch.float32})
    return {k.replace(".module", ""): v.detach().clone() for k, v in state.items()}


def tolerance(mode):
    """Relative to each tensor's largest magnitude: summation order across
    ranks differs from Gloo's ring by an ulp, and an element near zero would
    turn that into a large element-wise ratio; the fp16 hook rounds."""
    return 1e-3 if mode == "fp16" else 1e-6


def relative_difference(got, want):
    return ((got - want).abs().max() / want.abs().max().clamp(min=1e-12)).item()
