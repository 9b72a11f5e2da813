#!/usr/bin/env bash
# The packaged form works outside Bazel: a bare environment, PYTHONPATH only,
# the library and the torch c10d extension found beside the modules, and a
# 2-rank job through distrun (distkit.dist and torch.distributed on
# "distkit").
set -euo pipefail
package_script="$1"
lib="$2"
distrun="$3"
ext="$4"
pkg="${TEST_TMPDIR:-/tmp}/pkg"
"$package_script" "$pkg" "$lib" "$ext"
run() { env -i PATH=/usr/bin:/bin HOME="${TEST_TMPDIR:-/tmp}" PYTHONPATH="$pkg" "$@"; }
run /usr/bin/python3 -c '
import distkit, os
from distkit import dist, _lib
assert dist.get_world_size() == 1
assert os.path.dirname(distkit.__file__) == os.path.join(os.environ["PYTHONPATH"], "distkit")
print("imported", distkit.__file__)
'
run "$distrun" --nproc-per-node 2 --master-port 0 --timeout 60 -- /usr/bin/python3 -c '
import torch
from distkit import dist
dist.init_dist("pytorch", backend="gloo")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
assert t.item() == 3.0, t
import torch.distributed as tdist
from distkit import torch_backend
assert torch_backend.implementation() == ("c++", None), torch_backend.implementation()
tdist.all_reduce(t)
assert t.item() == 6.0, t
print("packaged distkit: all_reduce ok on rank", dist.get_rank())
dist.destroy()
'
