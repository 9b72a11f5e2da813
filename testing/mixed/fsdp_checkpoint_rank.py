"""The Python side of fsdp_checkpoint_xlang_test.sh: distkit.fsdp loads the
sharded checkpoint C++'s FullyShardedDataParallel wrote (at another world
size), checks every parameter, and writes one (each parameter i plus
0.01 (i + 1)) for C++ to load. The model mirrors cc/torch/
fsdp_multirank_test.cc's Net: the same modules under the same names, one
unit per block and the root.

    fsdp_checkpoint_rank.py <checkpoint C++ wrote> <directory to write>
"""
import os
import sys

import torch
from torch import nn

from distkit import dist
from distkit.fsdp import FullyShardedDataParallel, ModuleWrapPolicy
from testing.python.rank_check import check, finish

VOCAB, DIM = 11, 8


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.up = nn.Linear(DIM, width)
        self.down = nn.Linear(width, DIM)
        self.norm = nn.LayerNorm(DIM)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        for i in range(3):
            setattr(self, f"block{i}", Block(12 + 4 * i))
        self.head = nn.Linear(DIM, VOCAB)


def written_by_cpp(net):
    """C++'s MakeNet: parameter i is 0.3 sin(0.37 k + i), element k."""
    return {name: (0.3 * torch.sin(torch.arange(p.numel(), dtype=torch.float32) * 0.37 + i))
            .reshape(p.shape) for i, (name, p) in enumerate(net.named_parameters())}


def main():
    load_from, save_to = sys.argv[1], sys.argv[2]
    dist.init_dist("pytorch", backend="gloo")
    torch.manual_seed(5)
    net = Net()
    want = written_by_cpp(net)
    model = FullyShardedDataParallel(net, auto_wrap_policy=ModuleWrapPolicy({Block}))
    model.load_sharded_checkpoint(load_from)
    saved_world = len([f for f in os.listdir(load_from) if f.startswith("shard_rank")])
    check(saved_world != dist.get_world_size(),
          f"the checkpoint is of {saved_world} ranks, this job as many")
    got = model.state_dict()
    check(list(got) == list(want), f"keys {list(got)}")
    for name, value in want.items():
        check(torch.allclose(got[name], value, rtol=0, atol=1e-6),
              f"{name}: C++'s checkpoint loaded at {dist.get_world_size()} ranks differs by "
              f"{(got[name] - value).abs().max().item():.2e}")
    model.load_state_dict({name: value + 0.01 * (i + 1)
                           for i, (name, value) in enumerate(want.items())})
    if dist.get_rank() == 0:
        os.makedirs(save_to, exist_ok=True)
    dist.barrier()
    model.save_sharded_checkpoint(save_to)
    status = finish(f"Python loads C++'s sharded checkpoint of {saved_world} ranks")
    dist.destroy()
    return status


if __name__ == "__main__":
    sys.exit(main())
