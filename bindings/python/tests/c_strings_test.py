"""A string with a NUL byte is refused before the C ABI sees it: C would
read only the part before the NUL, so a store key "a\\0b" would set or read
"a". distkit._lib.c_string, the one conversion, and checks through the API
in one process."""
import ctypes
import unittest

from distkit import _lib, errors
from distkit._lib import c_string, lib, raise_for_status


class CStringTest(unittest.TestCase):

    def test_conversion(self):
        self.assertEqual(c_string("key", "abc"), b"abc")
        self.assertEqual(c_string("key", b"abc"), b"abc")
        self.assertEqual(c_string("key", "é"), "é".encode())
        self.assertEqual(c_string("key", ""), b"")
        for text in ("a\0b", b"a\0b", "\0", "ab\0"):
            with self.assertRaises(errors.InvalidArgumentError) as caught:
                c_string("store key", text)
            self.assertIn("store key", str(caught.exception))
            self.assertIn("NUL byte at", str(caught.exception))
            self.assertIsInstance(caught.exception, ValueError)


class ThroughTheApiTest(unittest.TestCase):

    def test_store_keys(self):
        from distkit import torch_backend
        config = _lib.StoreConfig()
        lib.dk_store_config_init(ctypes.byref(config))
        config.address = b"127.0.0.1:0"
        handle = ctypes.c_void_p()
        raise_for_status(lib.dk_store_serve, ctypes.byref(config), ctypes.byref(handle))
        store = torch_backend.DistkitStore(handle, prefix="")
        for call in (lambda: store.set("a\0b", b"v"), lambda: store.add("a\0b", 1),
                     lambda: store.get("a\0b"), lambda: store.check(["ok", "a\0b"]),
                     lambda: store.delete_key("a\0b"),
                     lambda: store.compare_set("a\0b", b"", b"v")):
            with self.assertRaisesRegex(errors.InvalidArgumentError, "store key 'a\\\\x00b'"):
                call()
        # Nothing was written under the part before the NUL.
        self.assertFalse(store.check(["a"]))
        store.set("a", b"1")
        self.assertEqual(store.get("a"), b"1")

    def test_launcher_name(self):
        from distkit.dist import launch
        with self.assertRaisesRegex(errors.InvalidArgumentError, "launcher 'pytorch\\\\x00'"):
            launch.launcher_info("pytorch\0")


if __name__ == "__main__":
    unittest.main()
