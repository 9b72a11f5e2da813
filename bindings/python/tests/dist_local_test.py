"""distkit.dist and distkit.distributed in one process, not distributed: the
answers and error messages mmengine's and modelopt's own tests check."""
import os
import unittest
from unittest import mock

import numpy as np
import torch

from distkit import device, dist, distributed, errors
from distkit.device import get_device


class NotDistributedTest(unittest.TestCase):

    def test_topology(self):
        self.assertFalse(dist.is_distributed())
        self.assertIsNone(dist.get_default_group())
        self.assertIsNone(dist.get_backend())
        self.assertEqual(dist.get_world_size(), 1)
        self.assertEqual(dist.get_rank(), 0)
        self.assertEqual(dist.get_dist_info(), (0, 1))
        self.assertTrue(dist.is_main_process())
        self.assertIsNone(dist.get_local_group())
        self.assertEqual(dist.get_local_rank(), 0)
        self.assertEqual(dist.get_local_size(), 1)
        self.assertEqual(dist.get_comm_device(), torch.device("cpu"))
        dist.barrier()
        self.assertEqual(dist.master_only(lambda: 5)(), 5)
        self.assertEqual(get_device(), "cpu")

    def test_infer_launcher(self):
        with mock.patch.dict(os.environ, {}, clear=True):
            self.assertEqual(dist.infer_launcher(), "none")
        with mock.patch.dict(os.environ, {"OMPI_COMM_WORLD_LOCAL_RANK": "0"}, clear=True):
            self.assertEqual(dist.infer_launcher(), "mpi")
        with mock.patch.dict(os.environ, {"SLURM_NTASKS": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "0"},
                             clear=True):
            self.assertEqual(dist.infer_launcher(), "slurm")
        with mock.patch.dict(os.environ, {"WORLD_SIZE": "2", "SLURM_NTASKS": "2"}, clear=True):
            self.assertEqual(dist.infer_launcher(), "pytorch")

    # The launcher's view comes from the library (dk_launcher_info), the
    # parsing dk_init joins with; capi/header_cxx_test.cc expects the same
    # values from C++ for the same Slurm variables.
    SLURM = {"SLURM_NTASKS": "8", "SLURM_PROCID": "5", "SLURM_LOCALID": "1",
             "SLURM_NTASKS_PER_NODE": "2(x4)", "SLURM_NODEID": "2",
             "SLURM_NODELIST": "node[01-03,07]"}

    def test_launcher_info_under_slurm(self):
        with mock.patch.dict(os.environ, self.SLURM, clear=True):
            self.assertEqual(dist.infer_launcher(), "slurm")
            self.assertEqual(dist.launcher_info(), dist.LauncherInfo(
                launcher="slurm", rank=5, world_size=8, local_rank=1, local_world_size=2,
                node_rank=2, master_addr="node01", master_port=29500,
                store_address="node01:29500", hosts_store=False))
        with mock.patch.dict(os.environ, {**self.SLURM, "SLURM_PROCID": "0",
                                          "SLURM_NODELIST": "gpu-a[7,9-10]",
                                          "MASTER_PORT": "1234"}, clear=True):
            info = dist.launcher_info("slurm")
            self.assertEqual((info.rank, info.master_addr, info.master_port, info.store_address,
                              info.hosts_store), (0, "gpu-a7", 1234, "gpu-a7:1234", True))
        with mock.patch.dict(os.environ, {**self.SLURM, "SLURM_PROCID": "five"}, clear=True):
            with self.assertRaisesRegex(errors.InvalidArgumentError, "SLURM_PROCID"):
                dist.launcher_info()

    def test_launcher_info_of_torchrun_and_mpi(self):
        torchrun = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
                    "GROUP_RANK": "1", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29400",
                    "TORCHELASTIC_USE_AGENT_STORE": "True"}
        with mock.patch.dict(os.environ, torchrun, clear=True):
            self.assertEqual(dist.launcher_info(), dist.LauncherInfo(
                launcher="pytorch", rank=3, world_size=4, local_rank=1, local_world_size=2,
                node_rank=1, master_addr="10.0.0.1", master_port=29400,
                store_address="10.0.0.1:29401", hosts_store=False))
        mpi = {"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4",
               "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
               "OMPI_COMM_WORLD_NODE_RANK": "0"}  # Open MPI's: rank 2 is first on its node
        with mock.patch.dict(os.environ, mpi, clear=True):
            # Without MASTER_ADDR: mpirun's placement only (the mpi backend's);
            # node 1 from rank 2's block of 2, not OMPI_COMM_WORLD_NODE_RANK.
            info = dist.launcher_info()
            self.assertEqual((info.launcher, info.rank, info.world_size, info.local_rank,
                              info.local_world_size, info.node_rank, info.store_address),
                             ("mpi", 2, 4, 0, 2, 1, ""))
        with mock.patch.dict(os.environ, {**mpi, "MASTER_ADDR": "h0"}, clear=True):
            self.assertEqual(dist.launcher_info("mpi").store_address, "h0:29500")
        with mock.patch.dict(os.environ, {}, clear=True):
            self.assertEqual(dist.launcher_info(), dist.LauncherInfo(
                "none", 0, 1, 0, 1, 0, "", 0, "", False))
            with self.assertRaisesRegex(ValueError, "Invalid launcher type: torchrun"):
                dist.launcher_info("torchrun")

    def test_collectives_are_local(self):
        data = torch.arange(2, dtype=torch.int64)
        dist.all_reduce(data, "mean")
        self.assertTrue(torch.equal(data, torch.arange(2)))
        self.assertEqual(dist.all_gather(data), [data])
        self.assertEqual(dist.gather(data), [data])
        dist.broadcast(data)
        dist.reduce(data, dst=0, op="max")
        self.assertTrue(torch.equal(data, torch.arange(2)))
        seed = dist.sync_random_seed()
        self.assertTrue(0 <= seed < 2**31)
        objs = ["foo", 12, {"k": 1}]
        dist.broadcast_object_list(objs)
        self.assertEqual(objs, ["foo", 12, {"k": 1}])
        with self.assertRaises(AssertionError):
            dist.broadcast_object_list("foo")
        self.assertEqual(dist.all_gather_object("x"), ["x"])
        self.assertEqual(dist.gather_object("x"), ["x"])
        d = {"a": torch.tensor([1.0])}
        dist.all_reduce_dict(d)
        self.assertEqual(d["a"].item(), 1.0)
        params = (p for p in [torch.zeros(2)])
        dist.all_reduce_params(params)
        self.assertEqual(len(list(params)), 1)  # a generator is not consumed
        self.assertEqual(dist.collect_results(["a", "b", "c"], 2), ["a", "b"])
        with self.assertRaises(NotImplementedError):
            dist.collect_results([], 1, device="tpu")
        with self.assertRaises(AssertionError):
            dist.collect_results([], 1, device="gpu", tmpdir="/tmp/x")

    def test_reduce_op_names(self):
        with self.assertRaisesRegex(
                ValueError,
                r"reduce op should be one of dict_keys\(\['sum', 'product', 'min', 'max', "
                r"'band', 'bor', 'bxor'\]\), bug got avg"):
            dist._get_reduce_op("avg")
        self.assertEqual(dist._get_reduce_op("SUM"), 0)

    def test_get_data_device(self):
        cpu = torch.device("cpu")
        meta = torch.empty(1, device="meta")
        self.assertEqual(dist.get_data_device(torch.zeros(1)), cpu)
        self.assertEqual(dist.get_data_device([torch.zeros(1), (torch.ones(2),)]), cpu)
        self.assertEqual(dist.get_data_device({"a": torch.zeros(1), "b": [torch.ones(1)]}), cpu)
        with self.assertRaisesRegex(ValueError, "device type in data should be consistent, but got meta and cpu"):
            dist.get_data_device([torch.zeros(1), meta])
        with self.assertRaisesRegex(ValueError, "data should not be empty."):
            dist.get_data_device([])
        with self.assertRaisesRegex(ValueError, "data should not be empty."):
            dist.get_data_device({})
        with self.assertRaisesRegex(TypeError, "data should be a Tensor, sequence of tensor or dict, but got 1"):
            dist.get_data_device(1)
        with self.assertRaisesRegex(TypeError, "but got 123"):
            dist.get_data_device(["123"])

    def test_cast_data_device(self):
        cpu = torch.device("cpu")
        t = torch.zeros(2)
        self.assertIs(dist.cast_data_device(t, cpu), t)  # no copy when already there
        on_meta = dist.cast_data_device([t, {"k": t}], torch.device("meta"))
        self.assertEqual(on_meta[1]["k"].device.type, "meta")
        self.assertIsInstance(on_meta, list)
        out = torch.ones(2)
        self.assertEqual(dist.cast_data_device(torch.full((2,), 3.0), cpu, out=out).device, cpu)
        self.assertTrue(torch.equal(out, torch.full((2,), 3.0)))
        tup = dist.cast_data_device((t, t), cpu)
        self.assertIsInstance(tup, tuple)
        with self.assertRaisesRegex(
                TypeError, "out should be the same type with data, but got data is <class 'list'> "
                "and out is <class 'list'>"):
            dist.cast_data_device([t], cpu, out=(t,))
        with self.assertRaisesRegex(TypeError, "out should not be a set"):
            dist.cast_data_device({t}, cpu, out={t})
        with self.assertRaisesRegex(ValueError, "length of data and out should be same, but got 1 and 2"):
            dist.cast_data_device({"a": t}, cpu, out={"a": t, "b": t})
        with self.assertRaisesRegex(ValueError, "data should not be empty"):
            dist.cast_data_device({}, cpu)
        with self.assertRaisesRegex(ValueError, "data should not be empty"):
            dist.cast_data_device([], cpu)
        for bad in (1, "abc", np.zeros(2)):
            with self.assertRaisesRegex(TypeError, "data should be a Tensor, list of tensor or dict"):
                dist.cast_data_device(bad, cpu)

    def test_init_dist_arguments(self):
        with self.assertRaisesRegex(ValueError, "Invalid launcher type: k8s"):
            dist.init_dist("k8s", backend="gloo")
        with self.assertRaisesRegex(TypeError, r"dist_cfg=dict\(backend='nccl', timeout=1800\)"):
            dist.init_dist("pytorch", backend="gloo", timeout="soon")

    def test_errors_carry_codes(self):
        e = errors.error_for(errors.INVALID_ARGUMENT, "bad")
        self.assertIsInstance(e, ValueError)
        self.assertIsInstance(e, errors.DistkitError)
        self.assertEqual(e.code, 3)
        self.assertIsInstance(errors.error_for(errors.DEADLINE_EXCEEDED, ""), TimeoutError)
        self.assertIsInstance(errors.error_for(errors.UNAVAILABLE, ""), ConnectionError)
        self.assertIsInstance(errors.error_for(errors.UNAUTHENTICATED, ""), PermissionError)
        unknown = errors.error_for(99, "from the future")
        self.assertIs(type(unknown), errors.DistkitError)
        self.assertEqual(unknown.code, 99)
        # Through the ABI: a collective without init is FAILED_PRECONDITION,
        # with its code read from the error object.
        from distkit import _lib
        with self.assertRaisesRegex(errors.FailedPreconditionError, "call dk_init first") as ctx:
            _lib.raise_for_status(_lib.lib.dk_group_barrier, None, None)
        self.assertEqual(ctx.exception.code, errors.FAILED_PRECONDITION)

    def test_modelopt_not_initialized(self):
        self.assertTrue(distributed.is_available())
        self.assertFalse(distributed.is_initialized())
        self.assertIsNone(distributed.backend())
        self.assertEqual((distributed.size(), distributed.rank()), (1, 0))
        self.assertTrue(distributed.is_master())
        distributed.barrier()
        dpg = distributed.DistributedProcessGroup()
        self.assertEqual((dpg.rank(), dpg.world_size()), (-1, -1))
        self.assertEqual(repr(dpg), "group: None, initialized: False, world size: -1")
        self.assertEqual(
            repr(distributed.ParallelState()),
            "data_parallel_group: group: None, initialized: False, world size: -1, "
            "tensor_parallel_group: group: -1, initialized: False, world size: -1, "
            "expert_model_parallel_group: group: -1, initialized: False, world size: -1")
        self.assertEqual(distributed.DistributedProcessGroup.get_dist_syncd_obj(3, dpg, max), 3)

    def test_modelopt_master_only_keeps_the_name(self):
        def named():
            """The doc."""
            return 7
        wrapped = distributed.master_only(named)
        self.assertEqual((wrapped.__name__, wrapped.__doc__, wrapped()), ("named", "The doc.", 7))


class LibraryDeviceTest(unittest.TestCase):
    """distkit.device over the ABI (dk_get_device, dk_tensor_copy)."""

    def test_rank_device(self):
        want = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
        got = device.rank_device()
        # A library built without CUDA answers cpu even where torch sees a GPU.
        self.assertIn(got, (want, torch.device("cpu")))
        self.assertTrue(device.library_reaches(torch.device("cpu")))

    def test_copy_tensor(self):
        src = np.arange(6, dtype=np.float32).reshape(2, 3)
        dst = torch.zeros(2, 3)
        device.copy_tensor(src, dst)
        self.assertTrue(torch.equal(dst, torch.arange(6, dtype=torch.float32).reshape(2, 3)))
        flags = torch.tensor([True, False, True])
        out = torch.zeros(3, dtype=torch.bool)
        device.copy_tensor(flags, out)
        self.assertTrue(torch.equal(out, flags))
        with self.assertRaises(errors.InvalidArgumentError) as e:
            device.copy_tensor(torch.zeros(3), torch.zeros(3, dtype=torch.float64))
        self.assertEqual(str(e.exception), "tensor_copy: src is float32 x3 but dst is float64 x3")
        with self.assertRaises(errors.InvalidArgumentError):
            device.copy_tensor(torch.zeros(4, 4).t(), torch.zeros(4, 4))  # not contiguous


class MMFullyShardedConfigTest(unittest.TestCase):
    """MMFullyShardedDataParallel's config conversions: mmengine's errors,
    raised before anything is sharded (no job needed)."""

    def make(self, **kwargs):
        from distkit.model import MMFullyShardedDataParallel
        return MMFullyShardedDataParallel(torch.nn.Linear(2, 2), **kwargs)

    def test_errors(self):
        with self.assertRaises(KeyError):
            self.make(sharding_strategy="FULL")
        with self.assertRaises(TypeError) as e:
            self.make(sharding_strategy=3)
        self.assertEqual(str(e.exception),
                         "sharding_strategy must be str or enum of `ShardingStrategy` , but got 3")
        with self.assertRaises(TypeError) as e:
            self.make(cpu_offload="yes")
        self.assertEqual(str(e.exception),
                         "`cpu_offload` should be `None`, `bool`or `CPUOffload`, but has type "
                         "<class 'str'>")
        with self.assertRaises(ValueError) as e:
            self.make(auto_wrap_policy="no_such_policy")
        self.assertEqual(str(e.exception), "`auto_wrap_policy` is not registered!")
        with self.assertRaises(ValueError) as e:
            self.make(auto_wrap_policy={"type": "no_such_policy"})
        self.assertEqual(str(e.exception), "`auto_wrap_policy` is not registered!")
        with self.assertRaises(TypeError) as e:
            self.make(auto_wrap_policy=5)
        self.assertEqual(str(e.exception), "`auto_wrap_policy` should be a str, a callable, a "
                         "dict or None, but has type <class 'int'>")
        with self.assertRaises(KeyError):
            self.make(backward_prefetch="BACKWARD_SOMETIME")
        with self.assertRaises(TypeError) as e:
            self.make(backward_prefetch=1)
        self.assertIn("`backward_prefetch` should be `None`, string of", str(e.exception))
        with self.assertRaises(ValueError) as e:
            self.make(param_init_fn="nothing")
        self.assertEqual(str(e.exception), "`param_init_fn` is not registered!")
        with self.assertRaises(TypeError) as e:
            self.make(mixed_precision="bf16")
        self.assertEqual(str(e.exception), "`mixed_precision` should be `None`, `dict` or "
                         "`MixedPrecision`, but has type <class 'str'>")
        with self.assertRaises(TypeError) as e:
            self.make(mixed_precision={"param_dtype": 16})
        self.assertEqual(str(e.exception), "`dtype` should be `None`, `str` or `torch.dtype`, "
                         "but has type <class 'int'>")
        with self.assertRaises(TypeError) as e:
            self.make(ignored_modules=[3])
        self.assertIn("`ignored_modules` should be `None`, `Iterable[str]` or "
                      "`Iterable[nn.Module]`", str(e.exception))

    def test_conversions(self):
        from distkit import fsdp
        from distkit.model_fsdp import _from_registry, _parse_dtype
        self.assertIs(_from_registry("torch.distributed.fsdp.wrap.size_based_auto_wrap_policy",
                                     "auto_wrap_policy"), fsdp.size_based_auto_wrap_policy)
        policy = _from_registry({"type": "size_based_auto_wrap_policy", "min_num_params": 10},
                                "auto_wrap_policy")
        self.assertTrue(policy(module=torch.nn.Linear(4, 4), recurse=False, nonwrapped_numel=20))
        self.assertFalse(policy(module=torch.nn.Linear(4, 4), recurse=False, nonwrapped_numel=5))
        self.assertIs(_parse_dtype("bfloat16"), torch.bfloat16)
        self.assertEqual(fsdp.ShardingStrategy["SHARD_GRAD_OP"], fsdp.ShardingStrategy.SHARD_GRAD_OP)


if __name__ == "__main__":
    unittest.main()
