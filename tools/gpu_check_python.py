#!/usr/bin/env python3
"""The Python half of tools/gpu_check.sh: distkit with CUDA tensors in real
processes on one GPU (several ranks may share it over Gloo; NCCL runs one
rank per GPU).

  casting, gloo, world sizes 1-4   CUDA tensors through all_reduce (sum and
                                   mean), all_gather, broadcast, objects and
                                   collect_results(device='gpu')
  ddp, gloo, world size 2          MMDistributedDataParallel with CUDA
                                   parameters (device_ids=[0], CPU inputs
                                   moved by forward) against the same model
                                   under CPU DDP
  ddp, nccl, world size 1          the same over NCCL, against training alone
  fsdp, nccl, world size 1         FullyShardedDataParallel with CUDA
                                   parameters (device_id=0 moves a CPU module)
                                   against training alone
  objects, nccl, world size 1      object collectives, collect_results(gpu),
                                   sync_random_seed, all_reduce_params and
                                   all_reduce_dict on CUDA data over NCCL
  torch, gloo, world size 2;       torch.distributed on the "distkit" backend
  torch, nccl, world size 1        (distkit's C++ c10d extension) with CUDA
                                   tensors: all_reduce sum and AVG,
                                   all_gather(_into_tensor),
                                   reduce_scatter_tensor, broadcast, an
                                   async all_reduce under a side stream, and
                                   torch's own DDP against training alone
  ranks, nccl, world size 2-4      CUDA tensors over NCCL, a GPU per rank
                                   (init_dist's set_device): all_reduce sum
                                   and mean, all_gather, broadcast, objects;
                                   SKIPPED (needs 2 GPUs) with fewer

GPU_CHECK_SCENARIOS=torch,ddp,... runs only the CUDA scenarios named.

With CUDA, before the scenarios: the "distkit" torch backend's C++
extension loads with this torch, or is built against it
(bindings/python/c10d/build_without_bazel.sh; a pip torch 2.x has no
extension built for it) and then loads.

First, with or without CUDA: the library, gloo, world size 2: distkit
imports with the libdistkit.so it is given (DISTKIT_LIBRARY, else
bazel-bin's), and CPU tensors go through it (what tools/gpu_bundle.sh's
bundle needs to work at all).

One PASS / FAIL line per check and a count; SKIPPED with the reason when
torch has no CUDA (then exit 77: the GPU part checked nothing) or no
libdistkit.so was built or named (set DISTKIT_LIBRARY; one built anywhere
with CUDA's headers loads here). A library that was named but does not load
is a FAIL. Exit 1 on any FAIL.
"""
import os
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SCENARIOS = [("casting", "gloo", n) for n in (1, 2, 3, 4)] + [
    ("ddp", "gloo", 2), ("ddp", "nccl", 1), ("fsdp", "nccl", 1), ("objects", "nccl", 1),
    ("torch", "gloo", 2), ("torch", "nccl", 1)]
# Scenarios whose ranks each take a GPU of their own (init_dist's set_device).
ONE_GPU_EACH = {"ranks"}


def setup_path():
    """The repository's distkit package, here and in every rank process."""
    package = os.path.join(ROOT, "bindings", "python")
    sys.path.insert(0, package)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [package] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    built = os.path.join(ROOT, "bazel-bin", "capi", "libdistkit.so")
    if "DISTKIT_LIBRARY" not in os.environ and os.path.exists(built):
        os.environ["DISTKIT_LIBRARY"] = built


# ---- one rank ------------------------------------------------------------------


def report(ok, what):
    print(f"{'PASS' if ok else 'FAIL'} {what}", flush=True)


def rank_casting(dist, torch, r, w):
    cuda = torch.device("cuda", 0)
    x = torch.full((1000,), float(r + 1), device=cuda)
    dist.all_reduce(x)
    report(x.device == cuda and torch.all(x == w * (w + 1) / 2).item(),
           f"all_reduce sum of cuda tensors over gloo, world {w}")
    y = torch.arange(10.0, device=cuda) * (r + 1)
    dist.all_reduce(y, "mean")
    want = torch.arange(10.0, device=cuda) * (w + 1) / 2
    report(torch.allclose(y, want), f"all_reduce mean of cuda tensors, world {w}")
    outs = dist.all_gather(torch.full((3,), float(r), device=cuda))
    report(len(outs) == w and all(o.device == cuda and torch.all(o == i).item()
                                  for i, o in enumerate(outs)),
           f"all_gather of cuda tensors (outputs on cuda), world {w}")
    b = torch.full((4,), float(r), device=cuda)
    dist.broadcast(b, src=w - 1)
    report(torch.all(b == w - 1).item(), f"broadcast of a cuda tensor, world {w}")
    objs = dist.all_gather_object({"rank": r})
    report(objs == [{"rank": i} for i in range(w)], f"all_gather_object, world {w}")
    results = dist.collect_results([f"item{r}"], w, device="gpu")
    if r == 0:
        report(sorted(results) == sorted(f"item{i}" for i in range(w)),
               f"collect_results(device='gpu'), world {w}")


def rank_library(dist, torch, r, w):
    from distkit import _lib
    import distkit
    report(True, f"distkit {distkit.__version__} imports with {_lib.lib._name}")
    x = torch.arange(6, dtype=torch.float64) * (r + 1)
    dist.all_reduce(x)
    report(torch.equal(x, torch.arange(6, dtype=torch.float64) * w * (w + 1) / 2),
           f"all_reduce sum of cpu tensors over gloo, world {w}")
    outs = dist.all_gather(torch.full((2,), r, dtype=torch.int64))
    report([o.tolist() for o in outs] == [[i, i] for i in range(w)],
           f"all_gather of cpu tensors over gloo, world {w}")


def rank_ranks(dist, torch, r, w):
    cuda = torch.device("cuda", torch.cuda.current_device())
    report(cuda.index == r % torch.cuda.device_count(),
           f"rank {r} of {w} is on cuda:{r} (init_dist's set_device)")
    x = torch.arange(1000, dtype=torch.float32, device=cuda) % 7 * (r + 1)
    dist.all_reduce(x)
    want = torch.arange(1000, dtype=torch.float32, device=cuda) % 7 * w * (w + 1) / 2
    report(torch.equal(x, want), f"all_reduce sum over nccl, world {w}")
    y = torch.full((100,), float(r), device=cuda)
    dist.all_reduce(y, "mean")
    report(torch.allclose(y, torch.full_like(y, (w - 1) / 2)),
           f"all_reduce mean over nccl, world {w}")
    outs = dist.all_gather(torch.full((3,), r, dtype=torch.int64, device=cuda))
    report(len(outs) == w and all(o.device == cuda and torch.all(o == i).item()
                                  for i, o in enumerate(outs)),
           f"all_gather over nccl, world {w}")
    b = torch.full((4,), float(r), dtype=torch.float64, device=cuda)
    dist.broadcast(b, src=w - 1)
    report(torch.all(b == w - 1).item(), f"broadcast over nccl, world {w}")
    report(dist.all_gather_object({"rank": r}) == [{"rank": i} for i in range(w)],
           f"all_gather_object over nccl, world {w}")


def model_pair(torch):
    torch.manual_seed(0)
    cpu = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    gpu = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    gpu.load_state_dict(cpu.state_dict())
    return cpu, gpu.cuda()


def train(torch, model, wrapped, r, steps=3, device="cpu"):
    sgd = torch.optim.SGD(wrapped.parameters(), lr=0.1)
    for step in range(steps):
        g = torch.Generator().manual_seed(100 * step + r)
        x, t = torch.randn(5, 8, generator=g), torch.randn(5, 4, generator=g)
        sgd.zero_grad()
        # CPU inputs: device_ids moves them for the CUDA model.
        loss = torch.nn.functional.mse_loss(wrapped(x), t.to(device))
        loss.backward()
        sgd.step()


def train_alone(torch, model, w, steps=3):
    """What data-parallel training over w ranks computes (each step the
    mean of the ranks' gradients), in one process with no communication."""
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(steps):
        sgd.zero_grad()
        for r in range(w):
            g = torch.Generator().manual_seed(100 * step + r)
            x, t = torch.randn(5, 8, generator=g), torch.randn(5, 4, generator=g)
            (torch.nn.functional.mse_loss(model(x), t) / w).backward()
        sgd.step()


def rank_torch(dist, torch, r, w, backend):
    """torch.distributed's own calls and DDP on the "distkit" backend."""
    import torch.distributed as tdist
    from distkit import torch_backend
    impl, why = torch_backend.implementation()
    report(impl == "c++", f"torch {torch.__version__}: the \"distkit\" backend runs on the C++ "
                          f"extension ({why or 'loaded'}), {backend}, world {w}")
    report(tdist.is_initialized() and tdist.get_backend() == "distkit",
           f"init_dist made torch's default group on \"distkit\" ({backend}, world {w})")
    cuda = torch.device("cuda", torch.cuda.current_device())
    tri = w * (w + 1) / 2
    base = (torch.arange(1000, device=cuda) % 7 + 1).float()
    x = base * (r + 1)
    tdist.all_reduce(x)
    report(x.device == cuda and torch.equal(x, base * tri),
           f"torch all_reduce sum of a cuda tensor ({backend}, world {w})")
    y = torch.full((64,), float(r), device=cuda)
    tdist.all_reduce(y, op=tdist.ReduceOp.AVG)
    report(torch.allclose(y, torch.full_like(y, (w - 1) / 2)),
           f"torch all_reduce AVG ({backend}, world {w})")
    out = torch.empty(4 * w, dtype=torch.int64, device=cuda)
    tdist.all_gather_into_tensor(out, torch.arange(4, dtype=torch.int64, device=cuda) + 10 * r)
    report(out.tolist() == [10 * i + j for i in range(w) for j in range(4)],
           f"torch all_gather_into_tensor ({backend}, world {w})")
    outs = [torch.empty(2, device=cuda) for _ in range(w)]
    tdist.all_gather(outs, torch.full((2,), float(r), device=cuda))
    report([o.tolist() for o in outs] == [[float(i)] * 2 for i in range(w)],
           f"torch all_gather into a list ({backend}, world {w})")
    rs_out = torch.empty(3, device=cuda)
    tdist.reduce_scatter_tensor(rs_out, torch.arange(3 * w, dtype=torch.float32, device=cuda)
                                * (r + 1))
    want = torch.arange(3 * r, 3 * r + 3, dtype=torch.float32, device=cuda) * tri
    report(torch.equal(rs_out, want), f"torch reduce_scatter_tensor ({backend}, world {w})")
    b = torch.full((5,), float(r), dtype=torch.float64, device=cuda)
    tdist.broadcast(b, src=w - 1)
    report(torch.all(b == w - 1).item(), f"torch broadcast ({backend}, world {w})")
    # Made on a side stream, reduced asynchronously, read on that stream
    # after wait(): the op must follow the caller's stream both ways.
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        z = torch.full((1 << 20,), float(r + 1), device=cuda) * 2
        work = tdist.all_reduce(z, async_op=True)
        work.wait()
        total = z.sum()
    torch.cuda.current_stream().wait_stream(side)
    report(total.item() == (1 << 20) * 2 * tri,
           f"torch async all_reduce under a side stream ({backend}, world {w})")
    # A strided output (a column), read on the side stream after wait():
    # the result written back into it must be there, not still queued.
    with torch.cuda.stream(side):
        grid = torch.zeros(1 << 16, 2, device=cuda)
        column = grid[:, 1]
        column.fill_(float(r + 1))
        tdist.all_reduce(column, async_op=True).wait()
        column_total = column.sum()
        outs = [torch.zeros(1 << 12, 2, device=cuda)[:, 0] for _ in range(w)]
        tdist.all_gather(outs, torch.full((1 << 12,), float(r), device=cuda), async_op=True).wait()
        gathered = [o.sum() for o in outs]
    torch.cuda.current_stream().wait_stream(side)
    report(column_total.item() == (1 << 16) * tri and
           [g.item() for g in gathered] == [float(i * (1 << 12)) for i in range(w)],
           f"torch all_reduce and all_gather into strided outputs, read on a side stream "
           f"({backend}, world {w})")
    # A torch Gloo group beside the default one, made over distkit's store
    # (torch 2.x keeps only its C++ wrapper of that store: distkit holds it).
    gloo = tdist.new_group(backend="gloo")
    c = torch.full((3,), float(r + 1))
    tdist.all_reduce(c, group=gloo)
    report(torch.equal(c, torch.full((3,), tri)),
           f"torch new_group(backend=\"gloo\") beside \"distkit\", all_reduce on it "
           f"({backend}, world {w})")
    cpu, gpu = model_pair(torch)
    ddp = torch.nn.parallel.DistributedDataParallel(gpu, device_ids=[cuda.index])
    train(torch, gpu, ddp, r, device="cuda")
    train_alone(torch, cpu, w)
    worst = max((a.detach().cpu() - b.detach()).abs().max().item()
                for a, b in zip(gpu.parameters(), cpu.parameters()))
    report(worst <= 1e-5, f"torch's DDP on cuda:{cuda.index} over \"distkit\" ({backend}) "
                          f"equals training alone, world {w} (worst difference {worst:.2g})")


def rank_ddp(dist, torch, r, w, backend):
    from distkit.model import MMDistributedDataParallel
    cpu, gpu = model_pair(torch)
    ddp_gpu = MMDistributedDataParallel(gpu, device_ids=[0])
    report(ddp_gpu.device_ids == [0] and ddp_gpu.output_device == 0,
           f"device_ids / output_device of a cuda module ({backend})")
    train(torch, gpu, ddp_gpu, r, device="cuda")
    if backend == "gloo":
        ddp_cpu = MMDistributedDataParallel(cpu)
        train(torch, cpu, ddp_cpu, r)
        what = f"CUDA DDP over gloo equals CPU DDP, world {w}"
    else:
        train(torch, cpu, cpu, r)  # world size 1: DDP is training alone
        what = "CUDA DDP over nccl equals training alone, world 1"
    worst = max((a.detach().cpu() - b.detach()).abs().max().item()
                for a, b in zip(gpu.parameters(), cpu.parameters()))
    report(worst <= 1e-5, f"{what} (worst difference {worst:.2g})")


def rank_fsdp(dist, torch, r, w):
    from distkit.fsdp import FullyShardedDataParallel as FSDP
    torch.manual_seed(0)
    cpu = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    moved = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    moved.load_state_dict(cpu.state_dict())
    fsdp = FSDP(moved, device_id=0)  # a CPU module, moved to cuda:0 by FSDP
    report(all(p.device.type == "cuda" for p in fsdp.parameters()),
           "FSDP(device_id=0) moves the module and shards it on cuda:0")
    train(torch, None, fsdp, r, device="cuda")
    train(torch, cpu, cpu, r)
    full = fsdp.state_dict()
    worst = max((full[k].detach().cpu() - v).abs().max().item()
                for k, v in cpu.state_dict().items())
    report(worst <= 1e-5, f"CUDA FSDP over nccl equals training alone (worst difference "
                          f"{worst:.2g})")


def rank_objects(dist, torch, r, w):
    cuda = torch.device("cuda", torch.cuda.current_device())
    report(dist.get_comm_device() == cuda, "get_comm_device() is cuda:<current> on nccl")
    report(dist.all_gather_object(["x", 1]) == [["x", 1]], "all_gather_object over nccl")
    lst = [{"a": 1}, "b"]
    dist.broadcast_object_list(lst)
    report(lst == [{"a": 1}, "b"], "broadcast_object_list over nccl")
    report(dist.gather_object(7) == [7], "gather_object over nccl")
    report(dist.collect_results(["p", "q"], 2, device="gpu") == ["p", "q"],
           "collect_results(device='gpu') over nccl")
    seed = dist.sync_random_seed()
    report(isinstance(seed, int) and 0 <= seed < 2**31, "sync_random_seed over nccl")
    params = [torch.nn.Parameter(torch.full((5,), 2.0, device=cuda)),
              torch.nn.Parameter(torch.full((3,), 3.0, device=cuda))]
    dist.all_reduce_params(params, coalesce=True)
    report(all(torch.all(p == v).item() for p, v in zip(params, (2.0, 3.0))),
           "all_reduce_params on cuda parameters over nccl")
    d = dist.all_reduce_dict({"loss": torch.tensor([1.5], device=cuda)})
    report(d["loss"].device.type == "cuda" and d["loss"].item() == 1.5,
           "all_reduce_dict on cuda values over nccl")


def run_rank(scenario, backend):
    import torch
    from distkit import dist
    dist.init_dist("pytorch", backend=backend, timeout=120)
    r, w = dist.get_rank(), dist.get_world_size()
    try:
        if scenario == "library":
            rank_library(dist, torch, r, w)
        elif scenario == "ranks":
            rank_ranks(dist, torch, r, w)
        elif scenario == "casting":
            rank_casting(dist, torch, r, w)
        elif scenario == "ddp":
            rank_ddp(dist, torch, r, w, backend)
        elif scenario == "fsdp":
            rank_fsdp(dist, torch, r, w)
        elif scenario == "torch":
            rank_torch(dist, torch, r, w, backend)
        else:
            rank_objects(dist, torch, r, w)
    except Exception as e:  # a check that raised is a FAIL, not a crash
        report(False, f"{scenario} over {backend}, world {w}, rank {r}: "
                      f"{type(e).__name__}: {e}")
    dist.barrier()
    dist.destroy()


# ---- the launcher --------------------------------------------------------------


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_job(scenario, backend, world_size, limit_s=180):
    port = free_port()
    procs = []
    for rank in range(world_size):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size),
                   LOCAL_WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port))
        if scenario not in ONE_GPU_EACH:  # every rank on the first GPU
            env["CUDA_VISIBLE_DEVICES"] = os.environ.get("CUDA_VISIBLE_DEVICES", "0")
        procs.append(subprocess.Popen([sys.executable, __file__, "--rank", scenario, backend],
                                      env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    deadline = time.monotonic() + limit_s
    lines, failed = [], False
    for rank, p in enumerate(procs):
        try:
            out, _ = p.communicate(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            return [f"FAIL {scenario} over {backend}, world {world_size}: rank {rank} still "
                    f"running after {limit_s} s"]
        checks = [l for l in out.splitlines() if l.startswith(("PASS ", "FAIL "))]
        if p.returncode != 0:
            checks.append(f"FAIL {scenario} over {backend}, world {world_size}: rank {rank} "
                          f"exited {p.returncode}:\n{out[-2000:]}")
        if rank == 0:
            lines += checks
        else:
            lines += [l for l in checks if l.startswith("FAIL")]
        failed |= p.returncode != 0
    return lines


def torch_backend_implementation():
    """distkit's torch backend in a fresh process: ("c++" | "python", why)."""
    probe = subprocess.run(
        [sys.executable, "-c", "from distkit import torch_backend as t; "
         "i, why = t.implementation(); print(i); print(why or '')"],
        capture_output=True, text=True, env=os.environ)
    if probe.returncode != 0:
        return "none", (probe.stderr.strip().splitlines() or ["?"])[-1]
    impl, why = (probe.stdout.splitlines() + ["", ""])[:2]
    return impl, why


def ensure_torch_extension(torch):
    """The "distkit" torch backend's C++ extension for this torch: loaded as
    found, else built (build_without_bazel.sh) and named by
    DISTKIT_C10D_EXTENSION for every rank. Returns (passed, failed)."""
    impl, why = torch_backend_implementation()
    if impl == "c++":
        print(f"PASS the \"distkit\" torch backend's C++ extension loads with torch "
              f"{torch.__version__}", flush=True)
        return 1, 0
    script = os.path.join(ROOT, "bindings", "python", "c10d", "build_without_bazel.sh")
    out_dir = os.environ.get("GPU_CHECK_OUT") or os.path.join(
        os.environ.get("TMPDIR", "/tmp"), "distkit_gpu_check_python")
    os.makedirs(out_dir, exist_ok=True)
    built = os.path.join(out_dir, f"_c10d-torch{torch.__version__.replace('+', '_')}.so")
    started = time.monotonic()
    # A session of its own: on a timeout its compilers go with it.
    build = subprocess.Popen(["bash", script, built, sys.executable], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        log, _ = build.communicate(timeout=600)
        ok = build.returncode == 0
    except subprocess.TimeoutExpired:
        os.killpg(build.pid, signal.SIGKILL)
        build.communicate()
        ok, log = False, "still compiling after 600 s"
    if not ok:
        print(f"FAIL the \"distkit\" torch backend's C++ extension does not build against torch "
              f"{torch.__version__} (it was not loaded: {why}):\n{log[-4000:]}", flush=True)
        return 0, 1
    os.environ["DISTKIT_C10D_EXTENSION"] = built
    impl, why = torch_backend_implementation()
    if impl != "c++":
        print(f"FAIL the C++ extension built against torch {torch.__version__} does not load: "
              f"{why}", flush=True)
        return 0, 1
    print(f"PASS the \"distkit\" torch backend's C++ extension builds against torch "
          f"{torch.__version__} ({time.monotonic() - started:.0f} s) and loads", flush=True)
    return 1, 0


# The exit status of a run that checked nothing (automake's "skipped").
SKIPPED = 77


def run_all(jobs):
    """Runs each (scenario, backend, world size) job; its lines and counts.
    A job that reported nothing fails: it must never look green having
    tested nothing."""
    passed = failed = 0
    for scenario, backend, world_size in jobs:
        lines = run_job(scenario, backend, world_size)
        if not any(l.startswith("PASS") for l in lines) and not any(
                l.startswith("FAIL") for l in lines):
            lines.append(f"FAIL {scenario} over {backend}, world {world_size}: no check "
                         f"reported")
        for line in lines:
            print(line, flush=True)
            passed += line.startswith("PASS")
            failed += line.startswith("FAIL")
    return passed, failed


def main():
    setup_path()
    try:
        import torch
    except ImportError as e:
        print(f"SKIPPED the Python checks: torch cannot be imported ({e})")
        print("gpu_check_python: 0 passed, 0 failed, 1 skipped")
        return SKIPPED
    named = os.environ.get("DISTKIT_LIBRARY")
    probe = subprocess.run([sys.executable, "-c", "import distkit"], capture_output=True,
                           text=True, env=os.environ)
    if probe.returncode != 0:
        why = (probe.stderr.strip().splitlines() or ["?"])[-1]
        if named:
            print(f"FAIL distkit does not import with DISTKIT_LIBRARY={named}: {why}")
            print("gpu_check_python: 0 passed, 1 failed, 0 skipped")
            return 1
        print("SKIPPED the Python checks: no libdistkit.so to import distkit with (build "
              "//capi:libdistkit.so or set DISTKIT_LIBRARY): " + why)
        print("gpu_check_python: 0 passed, 0 failed, 1 skipped")
        return SKIPPED
    passed, failed = run_all([("library", "gloo", 2)])
    skipped = 0
    if not torch.cuda.is_available():
        if torch.version.cuda is None:
            why = f"torch {torch.__version__} was built without CUDA"
        else:
            why = f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no usable GPU"
        print(f"SKIPPED the Python CUDA checks: {why}")
        skipped = 1
    else:
        p, f = ensure_torch_extension(torch)
        passed, failed = passed + p, failed + f
        # GPU_CHECK_SCENARIOS=torch,ddp: only those (a short run).
        only = [n for n in os.environ.get("GPU_CHECK_SCENARIOS", "").split(",") if n]
        jobs = [j for j in SCENARIOS if not only or j[0] in only]
        count = torch.cuda.device_count()
        if count >= 2:
            jobs.append(("ranks", "nccl", min(count, 4)))
        else:
            print(f"SKIPPED the Python multi-GPU NCCL checks: needs 2 GPUs, {count} here")
            skipped = 1
        p, f = run_all(jobs)
        passed, failed = passed + p, failed + f
    print(f"gpu_check_python: {passed} passed, {failed} failed, {skipped} skipped")
    if failed:
        return 1
    return SKIPPED if not torch.cuda.is_available() else 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--rank":
        setup_path()
        run_rank(sys.argv[2], sys.argv[3])
    else:
        sys.exit(main())
