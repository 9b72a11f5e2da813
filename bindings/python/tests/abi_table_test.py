"""The Python binding's ctypes table against the real distkit.h, as the Rust
binding's layout test does for its declarations: every declared function
exists in the header with the same number of arguments and the same kind of
return value; every function the package calls is declared (an undeclared
ctypes call silently returns int); every constant equals the header's; every
struct has the header's fields in order."""
import ctypes
import os
import re
import sys
import unittest

import distkit
from distkit import _lib, errors

HEADER = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(__file__), "..", "..", "..", "capi", "include", "distkit", "distkit.h")


def _without_comments(text: str) -> str:
    return re.sub(r"/\*.*?\*/", " ", text, flags=re.S)


def header_functions(text: str) -> dict:
    """name -> (return type, [argument declarations])."""
    out = {}
    for ret, name, args in re.findall(r"DK_EXPORT\s+([^;(]*?)\b(dk_\w+)\s*\(([^)]*)\)\s*;",
                                       _without_comments(text)):
        args = " ".join(args.split())
        out[name] = (" ".join(ret.split()), [] if args in ("", "void") else args.split(","))
    return out


def header_constants(text: str) -> dict:
    return {name: int(value) for name, value in
            re.findall(r"^#define (DK_\w+) (-?\d+)\b", _without_comments(text), flags=re.M)}


def header_structs(text: str) -> dict:
    """typedef name -> field names in order."""
    out = {}
    for body, name in re.findall(r"typedef struct dk_\w+ \{(.*?)\} (dk_\w+_t);",
                                 _without_comments(text), flags=re.S):
        out[name] = [re.findall(r"(\w+)\s*$", field.strip())[0]
                     for field in body.split(";") if field.strip()]
    return out


class AbiTableTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        with open(HEADER) as f:
            cls.text = f.read()
        cls.functions = header_functions(cls.text)
        cls.constants = header_constants(cls.text)

    def test_the_parser_sees_the_header(self):
        # Guards the regexes: a parser that finds nothing would pass the rest.
        self.assertGreater(len(self.functions), 70)
        self.assertEqual(self.functions["dk_group_all_reduce"][0], "dk_status_t")
        self.assertEqual(len(self.functions["dk_group_all_reduce"][1]), 5)
        self.assertEqual(self.functions["dk_shutdown"][1], [])
        self.assertEqual(self.constants["DK_OP_MEAN"], 7)

    def test_every_declaration_matches_the_header(self):
        for name, (restype, argtypes) in _lib._PROTOTYPES.items():
            with self.subTest(name=name):
                self.assertIn(name, self.functions, f"{name} is not in distkit.h")
                ret, args = self.functions[name]
                self.assertEqual(len(argtypes), len(args),
                                 f"{name}: {len(argtypes)} ctypes arguments, header has {args}")
                if ret == "void":
                    self.assertIsNone(restype, name)
                elif ret == "dk_status_t":
                    self.assertIs(restype, _lib.c_status, name)
                elif ret.endswith("*"):
                    self.assertIn(restype, (ctypes.c_char_p, ctypes.c_void_p), name)
                else:
                    self.assertEqual(ctypes.sizeof(restype),
                                     {"int32_t": 4, "int64_t": 8}[ret], name)

    def test_every_function_the_package_calls_is_declared(self):
        root = os.path.dirname(distkit.__file__)
        called = set()
        for folder, _, files in os.walk(root):
            for f in files:
                if f.endswith(".py"):
                    with open(os.path.join(folder, f)) as source:
                        called |= set(re.findall(r"\blib\.(dk_\w+)", source.read()))
        self.assertGreater(len(called), 30)
        self.assertEqual(sorted(called - set(_lib._PROTOTYPES)), [])

    def test_constants_equal_the_header(self):
        expected = {
            "ABI_MAJOR": "DK_ABI_MAJOR", "ABI_MINOR": "DK_ABI_MINOR",
            **{n: "DK_" + n for n in ("OP_SUM", "OP_PRODUCT", "OP_MIN", "OP_MAX", "OP_BAND",
                                      "OP_BOR", "OP_BXOR", "OP_MEAN", "WORK_PENDING",
                                      "WORK_SUCCEEDED", "WORK_FAILED", "PARALLEL_DATA",
                                      "PARALLEL_TENSOR", "PARALLEL_EXPERT", "COMM_HOOK_NONE",
                                      "COMM_HOOK_FP16", "COMM_HOOK_BF16", "SHARD_FULL_SHARD",
                                      "SHARD_SHARD_GRAD_OP", "SHARD_NO_SHARD",
                                      "SHARD_HYBRID_SHARD", "SHARD_HYBRID_SHARD_ZERO2",
                                      "SHARD_EVENT_UNSHARD_START", "SHARD_EVENT_UNSHARD_DONE",
                                      "SHARD_EVENT_RESHARD", "SHARD_EVENT_REDUCE_START",
                                      "SHARD_EVENT_REDUCE_DONE")},
        }
        for python_name, header_name in expected.items():
            with self.subTest(constant=python_name):
                self.assertEqual(getattr(_lib, python_name), self.constants[header_name])
        statuses = [n for n in self.constants if n[3:] in vars(errors) and n != "DK_EXPORT"]
        self.assertEqual(len(statuses), 17)
        for name in statuses:
            with self.subTest(status=name):
                self.assertEqual(getattr(errors, name[3:]), self.constants[name])
        self.assertEqual(_lib.GROUP_UNUSED.value, ctypes.c_void_p(-1).value)
        self.assertIn("#define DK_GROUP_UNUSED ((dk_group_t*)(intptr_t)-1)", self.text)
        self.assertEqual(_lib.DTYPE_UNSET, -1)
        self.assertIn("#define DK_DTYPE_UNSET (-1)", self.text)
        for name, code in _lib.REDUCE_OPS.items():
            self.assertEqual(code, self.constants["DK_OP_" + name.upper()])

    def test_structs_have_the_header_fields(self):
        structs = header_structs(self.text)
        for c_name, cls in (("dk_bytes_t", _lib.Bytes), ("dk_store_config_t", _lib.StoreConfig),
                            ("dk_init_config_t", _lib.InitConfig),
                            ("dk_group_options_t", _lib.GroupOptions),
                            ("dk_reducer_config_t", _lib.ReducerConfig),
                            ("dk_shard_config_t", _lib.ShardConfig),
                            ("dk_shard_event_t", _lib.ShardEvent),
                            ("dk_launcher_info_t", _lib.LauncherInfo)):
            with self.subTest(struct=c_name):
                self.assertEqual([f[0] for f in cls._fields_], structs[c_name])


if __name__ == "__main__":
    unittest.main()
