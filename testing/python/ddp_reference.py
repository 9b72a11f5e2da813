"""torch.nn.parallel.DistributedDataParallel (Gloo) on the models, data and
modes of cc/torch/ddp_multirank_test.cc (testing/python/ddp_model.py), then a
comparison of every parameter and buffer with the files the LibTorch DDP
wrote: within 1e-6 relative (to each tensor's largest magnitude) in float32
(1e-3 with the fp16 hook). Run by distrun in every rank:
python3 ddp_reference.py CPP_OUT_DIR."""
import os
import sys

import torch
import torch.distributed as tdist

from testing.python.ddp_model import (MODES, RANK, relative_difference, tolerance,
                                      torch_wrap, train)


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
        ref = train(mode, torch_wrap)
        got = read(os.path.join(sys.argv[1], f"cpp_{mode}_rank{RANK}.txt"))
        assert set(ref) == set(got), f"{mode}: names differ: {sorted(ref)} vs {sorted(got)}"
        for name, r in ref.items():
            r = r.flatten()
            g = got[name]
            rel = relative_difference(g, r)
            worst = max(worst, rel) if mode != "fp16" else worst
            if rel > tolerance(mode):
                print(f"rank {RANK}: {mode} {name}: max relative difference {rel:.3g} > "
                      f"{tolerance(mode)}\n"
                      f"  distkit {g[:6].tolist()}\n  torch   {r[:6].tolist()}", file=sys.stderr)
                sys.exit(1)
    print(f"rank {RANK}: every mode equals torch DDP (worst relative difference {worst:.2g})")
    tdist.destroy_process_group()


if __name__ == "__main__":
    main()
