"""Joins a torchrun job with distkit.dist.init_dist('pytorch') (torchrun's
own store holds MASTER_PORT) and checks rank, size and collectives."""
import os
import sys

import torch

from distkit import dist


def main():
    dist.init_dist("pytorch", backend="gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    assert rank == int(os.environ["RANK"]) and size == int(os.environ["WORLD_SIZE"])
    assert os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True", "not under torchrun's agent"
    t = torch.tensor([rank, 1])
    dist.all_reduce(t)
    assert t.tolist() == [size * (size - 1) // 2, size], t
    assert [x.item() for x in dist.all_gather(torch.tensor(rank))] == list(range(size))
    dist.barrier()
    print(f"rank {rank}/{size}: python joined through torchrun", flush=True)


if __name__ == "__main__":
    sys.exit(main())
