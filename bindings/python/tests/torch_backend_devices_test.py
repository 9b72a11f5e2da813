"""The "distkit" torch backend's Python fallback (torch_backend_fallback.py)
puts every buffer it makes on its input's device. Debian's torch cannot make
CUDA tensors, so meta tensors stand in for "not the CPU": the library call
is intercepted, and every tensor the backend lends it must be on the input's
device (a CPU buffer beside CUDA inputs is what broke torch's DDP
construction on CUDA). The C++ backend's twin of this test is
//bindings/python/c10d:process_group_devices_test (torch's dispatcher takes
no meta tensors, so it calls the process group from C++)."""
import unittest
from unittest import mock

import torch
from torch._C import _distributed_c10d as tdist

from distkit import torch_backend_fallback as torch_backend


class Recorded:
    """What Borrowed wraps, without touching memory (meta has none)."""

    def __init__(self, t):
        self.tensor = t
        self.pointer = None


class OutputDeviceTest(unittest.TestCase):

    def setUp(self):
        self.lent = []

        def borrow(t):
            self.lent.append(t)
            return Recorded(t)

        patcher = mock.patch.object(torch_backend, "Borrowed", borrow)
        patcher.start()
        self.addCleanup(patcher.stop)
        self.pg = torch_backend.ProcessGroupDistkitPython(0, 3, None)
        # The library is never called: the op's own buffers are what is checked.
        self.pg._run = lambda fn, args, keep, result, then=None: None

    def assert_all_meta(self, op):
        self.assertTrue(self.lent, op)
        for t in self.lent:
            self.assertEqual(t.device.type, "meta", f"{op} lent a {t.device} tensor")
        self.lent.clear()

    def meta(self, *shape):
        return torch.empty(*shape, device="meta")

    def test_every_op_keeps_the_device(self):
        x = self.meta(4)
        self.pg.allgather([[self.meta(4) for _ in range(3)]], [x], tdist.AllgatherOptions())
        self.assert_all_meta("allgather")
        self.pg._allgather_base(self.meta(12), x)
        self.assert_all_meta("_allgather_base")
        opts = tdist.GatherOptions()
        opts.rootRank = 0
        self.pg.gather([[self.meta(4) for _ in range(3)]], [x], opts)
        self.assert_all_meta("gather")
        opts = tdist.ScatterOptions()
        opts.rootRank = 0
        self.pg.scatter([x], [[self.meta(4) for _ in range(3)]], opts)
        self.assert_all_meta("scatter")
        self.pg.reduce_scatter([x], [[self.meta(4) for _ in range(3)]],
                               tdist.ReduceScatterOptions())
        self.assert_all_meta("reduce_scatter")
        self.pg.alltoall([self.meta(2) for _ in range(3)], [self.meta(2) for _ in range(3)])
        self.assert_all_meta("alltoall")
        self.pg.alltoall_base(self.meta(6), self.meta(6), [], [])
        self.assert_all_meta("alltoall_base")
        self.pg.allreduce([x], tdist.AllreduceOptions())
        self.assert_all_meta("allreduce")
        self.pg.broadcast([x], tdist.BroadcastOptions())
        self.assert_all_meta("broadcast")


if __name__ == "__main__":
    unittest.main()
