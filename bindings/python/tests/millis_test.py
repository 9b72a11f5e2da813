"""A caller's positive timeout under a millisecond reaches the C ABI as 1 ms,
never as 0 (which is a default there: the parent's timeout, the store's, or
a refusal of init): distkit._millis.to_millis, the one conversion every
module uses, and checks through the API in one process."""
import ctypes
import datetime
import time
import unittest
from unittest import mock

from distkit import _lib, errors
from distkit._lib import lib, raise_for_status
from distkit._millis import to_millis


class ToMillisTest(unittest.TestCase):

    def test_conversion(self):
        self.assertEqual(to_millis(None), -1)
        self.assertEqual(to_millis(None, none=0), 0)
        self.assertEqual(to_millis(0), 0)
        self.assertEqual(to_millis(datetime.timedelta(0)), 0)
        self.assertEqual(to_millis(0.0004), 1)
        self.assertEqual(to_millis(1e-9), 1)
        self.assertEqual(to_millis(datetime.timedelta(microseconds=500)), 1)
        self.assertEqual(to_millis(0.0015), 1)
        self.assertEqual(to_millis(2.5), 2500)
        self.assertEqual(to_millis(datetime.timedelta(seconds=3)), 3000)
        self.assertEqual(to_millis(-0.0004), -1)
        self.assertEqual(to_millis(-2), -2000)


class ThroughTheApiTest(unittest.TestCase):

    def test_init_dist_timeout_under_a_millisecond(self):
        # What init_dist hands dk_init, caught before it joins anything.
        from distkit.dist import launch
        seen = {}

        class Caught(Exception):
            pass

        def fake(fn, *args):
            if getattr(fn, "__name__", "") == "dk_init":
                config = args[1]._obj  # ctypes.byref(config)
                seen.update(timeout_ms=config.timeout_ms,
                            connect_timeout_ms=config.connect_timeout_ms)
                raise Caught()
            return raise_for_status(fn, *args)

        with mock.patch.object(launch, "raise_for_status", fake):
            with self.assertRaises(Caught):
                launch.init_dist("pytorch", backend="gloo", timeout=0.0004,
                                 connect_timeout=datetime.timedelta(microseconds=500))
        self.assertEqual(seen, {"timeout_ms": 1, "connect_timeout_ms": 1})

    def test_store_wait_under_a_millisecond(self):
        from distkit import torch_backend
        config = _lib.StoreConfig()
        lib.dk_store_config_init(ctypes.byref(config))
        config.address = b"127.0.0.1:0"
        handle = ctypes.c_void_p()
        raise_for_status(lib.dk_store_serve, ctypes.byref(config), ctypes.byref(handle))
        store = torch_backend.DistkitStore(handle)
        start = time.monotonic()
        with self.assertRaises(errors.DeadlineExceededError):
            store.wait(["never-set"], datetime.timedelta(microseconds=500))
        self.assertLess(time.monotonic() - start, 60)


if __name__ == "__main__":
    unittest.main()
