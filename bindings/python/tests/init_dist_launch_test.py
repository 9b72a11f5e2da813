"""init_dist in real processes laid out as launchers lay them out.

Launchers: under Slurm and MPI, init_dist exports torchrun's variables into
os.environ as mmengine's does.

One libdistkit.so with and without CUDA (issue 13): it never needs libcudart
or libnccl to load; CPU backends work when neither can be loaded; and 'nccl'
where it cannot run fails every rank within seconds with the same clear
message, at world sizes 1-4, even when rank 0 hosts the store (torchrun's
layout, where a rank that failed alone used to leave the others waiting 300 s
for it).

"Cannot be loaded" is made certain on any machine with the library's own
overrides, DISTKIT_CUDART_LIBRARY and DISTKIT_NCCL_LIBRARY, pointed at a file
that is not a library."""
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

from distkit import _lib

# One rank: joins with the launcher and backend in argv[1:3], reports what
# happened as JSON.
RANK_PROGRAM = r"""
import json, os, sys, time
import torch
from distkit import dist, errors
launcher, backend = sys.argv[1], sys.argv[2]
start = time.monotonic()
report = {}
try:
    dist.init_dist(launcher, backend=backend, timeout=60)
except errors.DistkitError as e:
    report.update(error=type(e).__name__, message=str(e))
else:
    report.update(rank=dist.get_rank(), world_size=dist.get_world_size(),
                  env={k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK",
                                                      "MASTER_ADDR", "MASTER_PORT")})
    t = torch.full((3,), float(dist.get_rank() + 1))
    dist.all_reduce(t)
    report.update(sum=t.tolist())
    dist.destroy()
report["seconds"] = time.monotonic() - start
print("REPORT " + json.dumps(report), flush=True)
"""


def free_port():
    return int(subprocess.check_output([sys.executable, os.environ["FREE_PORT_PAIR"]]).decode())


def torchrun_layout(rank, world_size, port):
    return dict(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size),
                LOCAL_WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))


def slurm_layout(rank, world_size, port):
    return dict(SLURM_PROCID=str(rank), SLURM_LOCALID=str(rank), SLURM_NTASKS=str(world_size),
                SLURM_NODELIST="localhost", SLURM_NTASKS_PER_NODE=str(world_size),
                MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))


def mpi_layout(rank, world_size, port):
    return dict(OMPI_COMM_WORLD_RANK=str(rank), OMPI_COMM_WORLD_SIZE=str(world_size),
                OMPI_COMM_WORLD_LOCAL_RANK=str(rank), OMPI_COMM_WORLD_LOCAL_SIZE=str(world_size),
                MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))


LAUNCHER_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                      "MASTER_PORT", "DISTKIT_STORE", "DISTKIT_TOKEN", "GROUP_RANK")


def run_job(world_size, backend, extra_env, limit_s=90, launcher="pytorch",
            layout=torchrun_layout):
    """Every rank as its own process, rank 0 hosting the store; their
    reports, in rank order."""
    port = free_port()
    procs = []
    for rank in range(world_size):
        env = {k: v for k, v in os.environ.items()
               if k not in LAUNCHER_VARIABLES and not k.startswith(("SLURM_", "OMPI_", "PMI_"))}
        env.update(layout(rank, world_size, port), **extra_env)
        procs.append(subprocess.Popen([sys.executable, "-c", RANK_PROGRAM, launcher, backend],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    deadline = time.monotonic() + limit_s
    reports = []
    for rank, p in enumerate(procs):
        try:
            out, _ = p.communicate(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise AssertionError(f"rank {rank} of {world_size} still running after {limit_s} s")
        lines = [l for l in out.decode().splitlines() if l.startswith("REPORT ")]
        if p.returncode != 0 or not lines:
            raise AssertionError(f"rank {rank} exited {p.returncode}:\n{out.decode()}")
        reports.append(json.loads(lines[-1][len("REPORT "):]))
    return reports


class LauncherExportsTest(unittest.TestCase):

    def test_slurm_and_mpi_export_torchrun_variables(self):
        for launcher, layout in (("slurm", slurm_layout), ("mpi", mpi_layout)):
            for world_size in (1, 2, 3):
                reports = run_job(world_size, "gloo", {}, launcher=launcher, layout=layout)
                for rank, r in enumerate(reports):
                    self.assertNotIn("error", r, r)
                    self.assertEqual((r["rank"], r["world_size"]), (rank, world_size), r)
                    self.assertEqual(r["env"]["RANK"], str(rank), (launcher, r))
                    self.assertEqual(r["env"]["WORLD_SIZE"], str(world_size), (launcher, r))
                    self.assertEqual(r["env"]["LOCAL_RANK"], str(rank), (launcher, r))
                    self.assertEqual(r["env"]["MASTER_ADDR"], "127.0.0.1", (launcher, r))
                    self.assertIsNotNone(r["env"]["MASTER_PORT"], (launcher, r))
                    self.assertEqual(r["sum"], [sum(range(1, world_size + 1))] * 3, r)


class CudaOptionalTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.not_a_library = os.path.join(cls.tmp.name, "libnot_a_library.so")
        with open(cls.not_a_library, "w") as f:
            f.write("this is not an ELF file\n")
        cls.no_cuda = {"DISTKIT_CUDART_LIBRARY": cls.not_a_library,
                       "DISTKIT_NCCL_LIBRARY": cls.not_a_library}

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_mpi_without_master_addr_is_a_key_error(self):
        # mmengine reads os.environ['MASTER_ADDR'] for the mpi launcher.
        env = {k: v for k, v in os.environ.items()
               if k not in LAUNCHER_VARIABLES and not k.startswith(("SLURM_", "OMPI_", "PMI_"))}
        env.update(mpi_layout(0, 1, 29500))
        del env["MASTER_ADDR"]
        program = ("from distkit import dist\n"
                   "try:\n"
                   "    dist.init_dist('mpi', backend='gloo', timeout=10)\n"
                   "except KeyError as e:\n"
                   "    print('KEYERROR', e.args[0])\n")
        out = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True,
                             text=True, timeout=60)
        self.assertIn("KEYERROR The environment variable MASTER_ADDR is not set", out.stdout,
                      out.stdout + out.stderr)

    def test_no_cuda_library_is_needed(self):
        path = _lib.lib._name
        out = subprocess.run(["readelf", "-d", path], check=True, capture_output=True,
                             text=True).stdout
        needed = [l.split("[", 1)[1].rstrip("]") for l in out.splitlines() if "(NEEDED)" in l]
        self.assertTrue(needed, f"readelf found no NEEDED entries in {path}:\n{out}")
        for name in needed:
            for cuda in ("libcudart", "libnccl", "libcuda.", "libcublas"):
                self.assertFalse(name.startswith(cuda),
                                 f"{path} needs {name}: it would not load without CUDA")

    def test_cpu_backends_work_without_cuda(self):
        for world_size in (1, 2, 3, 4):
            reports = run_job(world_size, "gloo", self.no_cuda)
            want = [sum(range(1, world_size + 1))] * 3
            for r in reports:
                self.assertNotIn("error", r, r)
                self.assertEqual(r["sum"], want, r)

    def test_nccl_fails_every_rank_fast_when_cuda_cannot_load(self):
        for world_size in (1, 2, 3, 4):
            reports = run_job(world_size, "nccl", self.no_cuda)
            messages = {r.get("message") for r in reports}
            self.assertEqual(len(messages), 1, f"ranks disagree: {reports}")
            for r in reports:
                self.assertEqual(r.get("error"), "FailedPreconditionError", r)
                self.assertLess(r["seconds"], 5.0, r)
                self.assertIn("the nccl backend needs a CUDA GPU", r["message"])
                self.assertIn("DISTKIT_CUDART_LIBRARY", r["message"])
                self.assertIn(self.not_a_library, r["message"])

    def test_unloadable_nccl_is_a_clear_error(self):
        # CUDA as this machine has it, NCCL broken: on a machine with a GPU
        # the message names NCCL; without one it names the missing GPU.
        env = {"DISTKIT_NCCL_LIBRARY": self.not_a_library}
        for world_size in (1, 2):
            reports = run_job(world_size, "nccl", env)
            for r in reports:
                self.assertEqual(r.get("error"), "FailedPreconditionError", r)
                self.assertLess(r["seconds"], 5.0, r)
                self.assertTrue(
                    "cannot load NCCL" in r["message"] or "no usable CUDA device" in r["message"]
                    or "no CUDA device" in r["message"] or "CUDA runtime" in r["message"],
                    r["message"])


if __name__ == "__main__":
    unittest.main()
