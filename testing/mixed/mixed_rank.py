"""The Python rank of the mixed-language job (see README.md): distkit.dist."""
import sys

import torch

from distkit import dist
from distkit.fsdp import FullyShardedDataParallel

N = 9


def check(ok, what):
    if not ok:
        print(f"rank {dist.get_rank()} (python): FAILED: {what}", file=sys.stderr)
        sys.exit(1)


def idx_f(k):
    return torch.arange(k, dtype=torch.float32)


def obj(r):
    return f"rank-{r};".encode() * (r + 1)


def main():
    dist.init_dist("pytorch", backend="gloo")
    r, n = dist.get_rank(), dist.get_world_size()
    idx = torch.arange(N)

    a = (r + 1) * (idx + 1)
    dist.all_reduce(a, "sum")
    check(torch.equal(a, n * (n + 1) // 2 * (idx + 1)), f"sum int64 {a}")
    b = (7 * r + idx) % 11
    dist.all_reduce(b, "max")
    want = torch.stack([(7 * q + idx) % 11 for q in range(n)]).max(dim=0).values
    check(torch.equal(b, want), f"max int64 {b}")
    c = 0.5 * (r + 1) + idx.float()
    dist.all_reduce(c, "sum")
    check(torch.equal(c, 0.25 * n * (n + 1) + n * idx.float()), f"sum float32 {c}")
    d = r - 0.25 * idx.float()
    dist.all_reduce(d, "max")
    check(torch.equal(d, (n - 1) - 0.25 * idx.float()), f"max float32 {d}")
    for q in range(n):
        e = 1000 * q + idx if r == q else torch.full((N,), -1, dtype=torch.int64)
        dist.broadcast(e, src=q)
        f = q + 0.125 * idx.float() if r == q else torch.full((N,), -1.0)
        dist.broadcast(f, src=q)
        check(torch.equal(e, 1000 * q + idx) and torch.equal(f, q + 0.125 * idx.float()),
              f"broadcast from {q}")
    parts = dist.all_gather(torch.tensor([10 * r, 10 * r + 1, 10 * r + 2]))
    check(torch.equal(torch.cat(parts), torch.tensor([10 * (j // 3) + j % 3 for j in range(3 * n)])),
          "all_gather")
    check(dist.all_gather_bytes(obj(r)) == [obj(q) for q in range(n)], "all_gather_object")
    names = [x.decode() for x in dist.all_gather_bytes(b"python")]
    check(set(names) <= {"c", "c++", "python", "rust", "go"} and len(set(names)) == len(names),
          f"language names {names}")
    print(f"rank {r} (python): languages: {' '.join(names)}")

    # 9: one model sharded across the languages (README), through distkit.fsdp.
    class Quadratic(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(0.1 * idx_f(10) if r == 0 else torch.full((10,), -5.0))

        def forward(self):
            return ((r + 1) * 0.05 * self.w ** 2 + 0.01 * idx_f(10) * self.w).sum()

    model = FullyShardedDataParallel(Quadratic(), sync_module_states=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    for _ in range(3):
        model().backward()
        opt.step()
        opt.zero_grad()
    w = model.state_dict()["w"]
    for i in range(10):
        want = 0.1 * i
        for _ in range(3):
            want -= 0.5 * (0.1 * want * (n + 1) / 2 + 0.01 * i)
        check(abs(w[i].item() - want) <= 1e-5 * max(1.0, abs(want)), f"sharded training {w}")

    # 10: the C rank's bool bytes 2 and 255 arrive as 1 (README), read as bytes.
    flags = dist.all_gather(torch.tensor([True, True, False, True]))
    got = torch.cat(flags).view(torch.uint8).tolist()
    check(got == [1, 1, 0, 1] * n, f"all_gather bool {got}")
    dist.barrier()
    print(f"rank {r} (python): mixed-language checks passed")


if __name__ == "__main__":
    main()
