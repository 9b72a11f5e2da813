#!/usr/bin/env bash
# pip install of distkit's source tree into a fresh venv, offline (the
# build step takes the library and the torch c10d extension from
# DISTKIT_LIBRARY and DISTKIT_C10D_EXTENSION, as prebuilt ones), then a
# 2-rank torchrun job (python -m torch.distributed.run, Debian's torch 1.13
# flags) imports it from the venv, without PYTHONPATH, and runs the seed's
# first example: init_dist, get_local_rank, all_reduce; and
# torch.distributed.all_reduce on the "distkit" backend, the C++ one.
set -euo pipefail
lib="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
pkgdir="$(dirname "$2")"  # bindings/python in the runfiles
ext="$(cd "$(dirname "$3")" && pwd)/$(basename "$3")"
tmp="$(mktemp -d "${TEST_TMPDIR:-/tmp}/pip.XXXXXX")"
mkdir -p "$tmp/src"
cp -rL "$pkgdir/pyproject.toml" "$pkgdir/setup.py" "$pkgdir/README.md" "$pkgdir/distkit" \
  "$tmp/src/"
chmod -R u+w "$tmp/src"
/usr/bin/python3 -m venv --system-site-packages "$tmp/venv"
env HOME="$tmp" PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 DISTKIT_LIBRARY="$lib" \
  DISTKIT_C10D_EXTENSION="$ext" "$tmp/venv/bin/python" -m pip install --no-build-isolation --no-index --no-deps -q "$tmp/src"
rm -rf "$tmp/src"  # only the installed copy is left to import
cat > "$tmp/job.py" <<'PY'
import os
import torch
import distkit
from distkit import dist
assert os.path.realpath(distkit.__file__).startswith(os.path.realpath(os.environ["VENV"])), \
    distkit.__file__
dist.init_dist("pytorch", backend="gloo")
rank, world_size = dist.get_dist_info()
local_rank = dist.get_local_rank()  # right after init_dist, as the seed does
assert local_rank == int(os.environ["LOCAL_RANK"]), local_rank
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
assert t.item() == world_size * (world_size + 1) / 2, t
import torch.distributed as tdist
from distkit import torch_backend
assert torch_backend.implementation() == ("c++", None), torch_backend.implementation()
assert tdist.get_backend() == "distkit", tdist.get_backend()
t = torch.ones(3)
tdist.all_reduce(t)
assert t.tolist() == [world_size] * 3, t
print(f"pip-installed distkit under torchrun: rank {rank} of {world_size} ok", flush=True)
dist.destroy()
PY
port="$(/usr/bin/python3 "$FREE_PORT_PAIR")"  # testing/free_port_pair.py
cd "$tmp"
env -i PATH=/usr/bin:/bin HOME="$tmp" VENV="$tmp/venv" timeout --signal=KILL 120 \
  "$tmp/venv/bin/python" -m torch.distributed.run --nproc_per_node 2 \
  --master_addr 127.0.0.1 --master_port "$port" --redirects 1 --tee 1 \
  --log_dir "$tmp/torchrun" job.py
echo "pip install + torchrun: passed"
