"""ctypes declarations of the C ABI (capi/include/distkit/distkit.h), its
constants, and the library loader. tests/abi_table_test.py checks every
declaration, constant and struct here against the header. ctypes releases the GIL around every call into a CDLL, so
blocking collectives never hold it.

The library is found, in order: $DISTKIT_LIBRARY; libdistkit.so beside this
package (the packaged form); the Bazel runfiles tree (capi/libdistkit.so).
"""
import ctypes
import os

from . import errors

c_status = ctypes.c_int32


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class Bytes(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("size", ctypes.c_size_t)]


class StoreConfig(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("address", ctypes.c_char_p),
        ("token", ctypes.c_char_p),
        ("timeout_ms", ctypes.c_int64),
        ("connect_timeout_ms", ctypes.c_int64),
    ]


class ReducerConfig(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("bucket_cap_mb", ctypes.c_double),
        ("first_bucket_cap_mb", ctypes.c_double),
        ("find_unused_parameters", ctypes.c_int32),
        ("gradient_as_bucket_view", ctypes.c_int32),
        ("broadcast_buffers", ctypes.c_int32),
        ("comm_hook", ctypes.c_int32),
    ]


class ShardConfig(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("strategy", ctypes.c_int32),
        ("param_dtype", ctypes.c_int32),
        ("reduce_dtype", ctypes.c_int32),
        ("offload_params", ctypes.c_int32),
        ("sync_module_states", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
        ("replicate_group", ctypes.c_void_p),
        ("frozen", ctypes.POINTER(ctypes.c_int32)),  # ABI 0.13
    ]


class ShardEvent(ctypes.Structure):
    _fields_ = [
        ("unix_ns", ctypes.c_int64),
        ("kind", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
    ]


class InitConfig(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("backend", ctypes.c_char_p),
        ("timeout_ms", ctypes.c_int64),
        ("connect_timeout_ms", ctypes.c_int64),
    ]


class GroupOptions(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("name", ctypes.c_char_p),
        ("timeout_ms", ctypes.c_int64),
        ("connect_timeout_ms", ctypes.c_int64),
    ]


class LauncherInfo(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("launcher", ctypes.c_char_p),
        ("rank", ctypes.c_int32),
        ("world_size", ctypes.c_int32),
        ("local_rank", ctypes.c_int32),
        ("local_world_size", ctypes.c_int32),
        ("node_rank", ctypes.c_int32),
        ("master_port", ctypes.c_int32),
        ("master_addr", ctypes.c_char_p),
        ("store_address", ctypes.c_char_p),
        ("hosts_store", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
    ]


# ---- Constants (the header's DK_* values; status codes live in errors.py) ----

ABI_MAJOR, ABI_MINOR = 0, 14

OP_SUM, OP_PRODUCT, OP_MIN, OP_MAX, OP_BAND, OP_BOR, OP_BXOR, OP_MEAN = range(8)
# mmengine's op names (mean is all_reduce's own, not a reduce op there).
REDUCE_OPS = {"sum": OP_SUM, "product": OP_PRODUCT, "min": OP_MIN, "max": OP_MAX,
              "band": OP_BAND, "bor": OP_BOR, "bxor": OP_BXOR}

WORK_PENDING, WORK_SUCCEEDED, WORK_FAILED = 0, 1, 2

PARALLEL_DATA, PARALLEL_TENSOR, PARALLEL_EXPERT = 0, 1, 2
GROUP_UNUSED = ctypes.c_void_p(-1)  # DK_GROUP_UNUSED, (dk_group_t*)(intptr_t)-1

COMM_HOOK_NONE, COMM_HOOK_FP16, COMM_HOOK_BF16 = 0, 1, 2

(SHARD_FULL_SHARD, SHARD_SHARD_GRAD_OP, SHARD_NO_SHARD, SHARD_HYBRID_SHARD,
 SHARD_HYBRID_SHARD_ZERO2) = range(5)
DTYPE_UNSET = -1
(SHARD_EVENT_UNSHARD_START, SHARD_EVENT_UNSHARD_DONE, SHARD_EVENT_RESHARD,
 SHARD_EVENT_REDUCE_START, SHARD_EVENT_REDUCE_DONE) = range(5)

# ---- Functions ----------------------------------------------------------------

P = ctypes.c_void_p  # opaque handles
PP = ctypes.POINTER(ctypes.c_void_p)
T = ctypes.POINTER(DLTensor)

_PROTOTYPES = {
    "dk_init_version": (c_status, [ctypes.c_int32, ctypes.c_int32, PP]),
    "dk_error_code": (c_status, [P]),
    "dk_error_message": (ctypes.c_char_p, [P]),
    "dk_error_free": (None, [P]),
    "dk_free": (None, [P]),
    "dk_store_config_init": (None, [ctypes.POINTER(StoreConfig)]),
    "dk_store_config_init_sized": (None, [ctypes.POINTER(StoreConfig), ctypes.c_size_t]),
    "dk_store_connect": (c_status, [ctypes.POINTER(StoreConfig), PP, PP]),
    "dk_store_serve": (c_status, [ctypes.POINTER(StoreConfig), PP, PP]),
    "dk_store_address": (ctypes.c_char_p, [P]),
    "dk_default_store": (c_status, [PP, PP]),
    "dk_store_destroy": (None, [P]),
    "dk_store_set": (c_status, [P, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t, PP]),
    "dk_store_get": (c_status, [P, ctypes.c_char_p, PP, ctypes.POINTER(ctypes.c_size_t), PP]),
    "dk_store_add": (c_status, [P, ctypes.c_char_p, ctypes.c_int64, ctypes.POINTER(ctypes.c_int64), PP]),
    "dk_store_wait": (c_status, [P, ctypes.POINTER(ctypes.c_char_p), ctypes.c_size_t,
                                 ctypes.c_int64, PP]),
    "dk_store_check": (c_status, [P, ctypes.POINTER(ctypes.c_char_p), ctypes.c_size_t,
                                  ctypes.POINTER(ctypes.c_int32), PP]),
    "dk_store_delete_key": (c_status, [P, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int32), PP]),
    "dk_store_compare_set": (c_status, [P, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t,
                                        ctypes.c_void_p, ctypes.c_size_t, PP,
                                        ctypes.POINTER(ctypes.c_size_t), PP]),
    "dk_store_num_keys": (c_status, [P, ctypes.POINTER(ctypes.c_int64), PP]),
    "dk_launcher_infer": (ctypes.c_char_p, []),
    "dk_launcher_info": (c_status, [ctypes.c_char_p, ctypes.POINTER(ctypes.POINTER(LauncherInfo)),
                                    PP]),
    "dk_init_config_init": (None, [ctypes.POINTER(InitConfig)]),
    "dk_init_config_init_sized": (None, [ctypes.POINTER(InitConfig), ctypes.c_size_t]),
    "dk_init": (c_status, [ctypes.c_char_p, ctypes.POINTER(InitConfig), PP, PP]),
    "dk_init_with_store": (c_status, [P, ctypes.c_int32, ctypes.c_int32,
                                      ctypes.POINTER(InitConfig), PP, PP]),
    "dk_shutdown": (None, []),
    "dk_is_distributed": (ctypes.c_int32, []),
    "dk_group_rank": (ctypes.c_int32, [P]),
    "dk_group_size": (ctypes.c_int32, [P]),
    "dk_group_backend": (ctypes.c_char_p, [P]),
    "dk_group_global_rank": (ctypes.c_int32, [P, ctypes.c_int32]),
    "dk_group_name": (ctypes.c_char_p, [P]),
    "dk_group_new": (c_status, [P, ctypes.POINTER(ctypes.c_int32), ctypes.c_size_t, PP, PP]),
    "dk_group_new_named": (c_status, [P, ctypes.POINTER(ctypes.c_int32), ctypes.c_size_t,
                                      ctypes.c_char_p, PP, PP]),
    "dk_group_options_init": (None, [ctypes.POINTER(GroupOptions)]),
    "dk_group_options_init_sized": (None, [ctypes.POINTER(GroupOptions), ctypes.c_size_t]),
    "dk_group_new_with_options": (c_status, [P, ctypes.POINTER(ctypes.c_int32), ctypes.c_size_t,
                                             ctypes.POINTER(GroupOptions), PP, PP]),
    "dk_group_destroy": (None, [P]),
    "dk_group_abort": (None, [P]),
    "dk_group_shrink": (c_status, [P, ctypes.c_int64, PP, PP]),
    "dk_group_grow": (c_status, [P, ctypes.c_int32, ctypes.c_int64, PP, PP]),
    "dk_group_grow_pending": (c_status, [P, ctypes.POINTER(ctypes.c_int32), PP]),
    "dk_group_async_error": (c_status, [P, PP]),
    "dk_work_test": (c_status, [P, ctypes.POINTER(ctypes.c_int32), PP]),
    "dk_work_wait": (c_status, [P, ctypes.c_int64, PP]),
    "dk_work_destroy": (None, [P]),
    "dk_group_all_reduce": (c_status, [P, T, ctypes.c_int32, PP, PP]),
    "dk_group_broadcast": (c_status, [P, T, ctypes.c_int32, PP, PP]),
    "dk_group_reduce": (c_status, [P, T, ctypes.c_int32, ctypes.c_int32, PP, PP]),
    "dk_group_all_gather": (c_status, [P, T, T, PP, PP]),
    "dk_group_gather": (c_status, [P, T, T, ctypes.c_int32, PP, PP]),
    "dk_group_barrier": (c_status, [P, PP, PP]),
    "dk_group_scatter": (c_status, [P, T, T, ctypes.c_int32, PP, PP]),
    "dk_group_reduce_scatter": (c_status, [P, T, T, ctypes.c_int32, PP, PP]),
    "dk_group_all_to_all": (c_status, [P, T, ctypes.POINTER(ctypes.c_int64), T,
                                       ctypes.POINTER(ctypes.c_int64), ctypes.c_size_t, PP, PP]),
    "dk_group_send": (c_status, [P, T, ctypes.c_int32, ctypes.c_int32, PP, PP]),
    "dk_group_recv": (c_status, [P, T, ctypes.c_int32, ctypes.c_int32, PP, PP]),
    "dk_init_local_group": (c_status, [ctypes.c_int32, ctypes.c_int32, PP]),
    "dk_init_local_group_from_launcher": (c_status, [PP]),
    "dk_local_group": (c_status, [PP, PP]),
    "dk_group_all_reduce_coalesced": (c_status, [P, ctypes.POINTER(T), ctypes.c_size_t, ctypes.c_int32,
                                                 ctypes.c_int32, ctypes.c_int64, PP]),
    "dk_group_all_gather_object": (c_status, [P, ctypes.c_void_p, ctypes.c_size_t,
                                              ctypes.POINTER(ctypes.POINTER(Bytes)),
                                              ctypes.POINTER(ctypes.c_size_t), PP]),
    "dk_group_gather_object": (c_status, [P, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int32,
                                          ctypes.POINTER(ctypes.POINTER(Bytes)),
                                          ctypes.POINTER(ctypes.c_size_t), PP]),
    "dk_reducer_config_init": (None, [ctypes.POINTER(ReducerConfig)]),
    "dk_reducer_config_init_sized": (None, [ctypes.POINTER(ReducerConfig), ctypes.c_size_t]),
    "dk_reducer_create": (c_status, [P, ctypes.POINTER(T), ctypes.c_size_t, ctypes.POINTER(T),
                                     ctypes.c_size_t, ctypes.POINTER(ReducerConfig), PP, PP]),
    "dk_reducer_destroy": (None, [P]),
    "dk_reducer_prepare": (c_status, [P, ctypes.POINTER(ctypes.c_int32), ctypes.c_size_t, PP]),
    "dk_reducer_mark_ready": (c_status, [P, ctypes.c_int32, T, PP]),
    "dk_reducer_finalize": (c_status, [P, PP]),
    "dk_reducer_abandon": (c_status, [P, PP]),
    "dk_reducer_set_require_sync": (None, [P, ctypes.c_int32]),
    "dk_reducer_broadcast_buffers": (c_status, [P, PP]),
    "dk_reducer_grad_view": (c_status, [P, ctypes.c_int32, PP, PP]),
    "dk_reducer_view_generation": (ctypes.c_int64, [P]),
    "dk_reducer_reduced_grad": (c_status, [P, ctypes.c_int32, PP, PP]),
    "dk_reducer_globally_used": (ctypes.c_int32, [P, ctypes.c_int32]),
    "dk_reducer_num_buckets": (ctypes.c_int32, [P]),
    "dk_group_broadcast_object_list": (c_status, [P, ctypes.POINTER(Bytes), ctypes.c_size_t,
                                                  ctypes.c_int32,
                                                  ctypes.POINTER(ctypes.POINTER(Bytes)),
                                                  ctypes.POINTER(ctypes.c_size_t), PP]),
    "dk_group_sync_random_seed": (c_status, [P, ctypes.POINTER(ctypes.c_int32), PP]),
    "dk_group_collect_results": (c_status, [P, ctypes.POINTER(Bytes), ctypes.c_size_t,
                                            ctypes.c_int64, ctypes.c_char_p, ctypes.c_char_p,
                                            ctypes.POINTER(ctypes.POINTER(Bytes)),
                                            ctypes.POINTER(ctypes.c_size_t), PP]),
    "dk_parallel_state_create": (c_status, [P, P, P, PP, PP]),
    "dk_parallel_state_destroy": (None, [P]),
    "dk_parallel_state_rank": (ctypes.c_int32, [P, ctypes.c_int32]),
    "dk_parallel_state_size": (ctypes.c_int32, [P, ctypes.c_int32]),
    "dk_parallel_state_describe": (c_status, [P, PP, PP]),
    "dk_get_device": (None, [ctypes.POINTER(DLDevice)]),
    "dk_group_comm_device": (c_status, [P, ctypes.POINTER(DLDevice), PP]),
    "dk_group_set_cuda_stream": (c_status, [P, P, PP]),
    "dk_shard_config_init": (None, [ctypes.POINTER(ShardConfig)]),
    "dk_shard_config_init_sized": (None, [ctypes.POINTER(ShardConfig), ctypes.c_size_t]),
    "dk_shard_create": (c_status, [P, ctypes.POINTER(T), ctypes.c_size_t,
                                   ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ShardConfig),
                                   PP, PP]),
    "dk_shard_destroy": (None, [P]),
    "dk_shard_unshard": (c_status, [P, PP]),
    "dk_shard_unshard_start": (c_status, [P, PP]),
    "dk_shard_unshard_wait": (c_status, [P, PP]),
    "dk_shard_reshard": (c_status, [P, PP]),
    "dk_shard_full_param": (c_status, [P, ctypes.c_int32, PP, PP]),
    "dk_shard_accumulate_grad": (c_status, [P, ctypes.c_int32, T, PP]),
    "dk_shard_full_grad": (c_status, [P, ctypes.c_int32, PP, PP]),
    "dk_shard_reduce_grads": (c_status, [P, PP]),
    "dk_shard_reduce_grads_start": (c_status, [P, PP]),
    "dk_shard_reduce_grads_wait": (c_status, [P, PP]),
    "dk_shard_set_require_sync": (None, [P, ctypes.c_int32]),
    "dk_shard_num_flat": (ctypes.c_int32, [P]),
    "dk_shard_local": (c_status, [P, ctypes.c_int32, PP, PP, ctypes.POINTER(ctypes.c_int64),
                                  ctypes.POINTER(ctypes.c_int32), PP]),
    "dk_shard_zero_grads": (None, [P]),
    "dk_shard_piece": (c_status, [P, ctypes.c_int32, ctypes.POINTER(ctypes.c_int64),
                                  ctypes.POINTER(ctypes.c_int64), PP, PP, PP]),
    "dk_shard_load_sharded": (c_status, [P, ctypes.c_int32, ctypes.POINTER(T), ctypes.c_size_t,
                                         PP]),
    "dk_shard_held_bytes": (ctypes.c_int64, [P]),
    "dk_shard_peak_held_bytes": (ctypes.c_int64, [P]),
    "dk_shard_take_events": (c_status, [P, ctypes.POINTER(ShardEvent), ctypes.c_size_t,
                                        ctypes.POINTER(ctypes.c_size_t), PP]),
    "dk_shard_gather_full": (c_status, [P, ctypes.POINTER(T), ctypes.c_size_t, ctypes.c_int32,
                                        PP]),
    "dk_shard_load_full": (c_status, [P, ctypes.POINTER(T), ctypes.c_size_t, ctypes.c_int32,
                                      PP]),
    "dk_tensor_copy": (c_status, [T, T, PP]),
    # Elastic snapshots (ABI 0.8): declared for the table; distkit.elastic
    # keeps torch objects itself.
    "dk_snapshot_create": (c_status, [PP, PP]),
    "dk_snapshot_destroy": (None, [P]),
    "dk_snapshot_register": (c_status, [P, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t, PP]),
    "dk_snapshot_commit": (c_status, [P, PP]),
    "dk_snapshot_sync": (c_status, [P, P, ctypes.POINTER(ctypes.c_int64), PP]),
    "dk_snapshot_restore": (c_status, [P, PP]),
    "dk_snapshot_commit_number": (ctypes.c_int64, [P]),
    "dk_snapshot_bytes": (ctypes.c_int64, [P]),
    "dk_sharded_snapshot_create": (c_status, [PP, PP]),
    "dk_sharded_snapshot_destroy": (None, [P]),
    "dk_sharded_snapshot_register": (c_status, [P, ctypes.c_char_p, ctypes.c_void_p,
                                                ctypes.c_size_t, PP]),
    "dk_sharded_snapshot_commit": (c_status, [P, P, PP]),
    "dk_sharded_snapshot_fetch": (c_status, [P, P, ctypes.POINTER(ctypes.c_int32),
                                             ctypes.c_size_t, ctypes.POINTER(ctypes.c_int64),
                                             ctypes.POINTER(ctypes.c_int32), PP]),
    "dk_sharded_snapshot_shard": (c_status, [P, ctypes.c_int32, ctypes.c_int32, PP,
                                             ctypes.POINTER(ctypes.c_size_t), PP]),
    "dk_sharded_snapshot_commit_number": (ctypes.c_int64, [P]),
    "dk_sharded_snapshot_bytes": (ctypes.c_int64, [P]),
}


def _candidates():
    env = os.environ.get("DISTKIT_LIBRARY")
    if env:
        yield env
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, "libdistkit.so")
    # Bazel: <runfiles>/distkit/bindings/python/distkit -> <runfiles>/distkit/capi
    yield os.path.join(here, "..", "..", "..", "capi", "libdistkit.so")
    runfiles = os.environ.get("RUNFILES_DIR")
    if runfiles:
        yield os.path.join(runfiles, "distkit", "capi", "libdistkit.so")


def _load():
    tried = []
    for path in _candidates():
        if os.path.exists(path):
            lib = ctypes.CDLL(path)
            for name, (restype, argtypes) in _PROTOTYPES.items():
                fn = getattr(lib, name)
                fn.restype = restype
                fn.argtypes = argtypes
            err = ctypes.c_void_p()
            status = lib.dk_init_version(ABI_MAJOR, ABI_MINOR, ctypes.byref(err))
            if status != errors.OK:
                message = lib.dk_error_message(err).decode()
                lib.dk_error_free(err)
                raise ImportError(f"{path}: {message}")
            return lib
        tried.append(path)
    raise ImportError("libdistkit.so not found; set DISTKIT_LIBRARY (tried: " + ", ".join(tried) + ")")


lib = _load()


def raise_for_status(fn, *args):
    """Calls ABI function `fn` with an error out-parameter appended; raises the
    mapped exception on failure. The error is copied and freed in this call."""
    err = ctypes.c_void_p()
    status = fn(*args, ctypes.byref(err))
    if status != errors.OK:
        message = lib.dk_error_message(err).decode("utf-8", "replace") if err else ""
        code = lib.dk_error_code(err) if err else status
        lib.dk_error_free(err)
        raise errors.error_for(code, message)



def c_string(what: str, text) -> bytes:
    """``text`` (str or bytes) as the bytes of a C string, or
    InvalidArgumentError naming ``what`` where it holds a NUL byte: C reads
    only the part before it, so a store key or a backend's name would
    silently become another one. The strings a user hands the ABI go
    through it."""
    data = text.encode() if isinstance(text, str) else bytes(text)
    at = data.find(b"\0")
    if at >= 0:
        raise errors.InvalidArgumentError(
            errors.INVALID_ARGUMENT,
            f"{what} {text!r} holds a NUL byte at {at} (a C string would end there)")
    return data


def tensor_array(views):
    """A DLTensor* array over Borrowed views (keep the views alive for the call)."""
    return (T * len(views))(*[v.pointer for v in views])


def take_string(pointer: ctypes.c_void_p) -> str:
    """Copies a library-allocated C string, then frees it."""
    try:
        return ctypes.string_at(pointer).decode()
    finally:
        lib.dk_free(pointer)


def take_items(items, count) -> list:
    """Copies a library-allocated dk_bytes_t list into bytes objects, then frees it."""
    try:
        return [ctypes.string_at(items[i].data, items[i].size) if items[i].size else b""
                for i in range(count.value)]
    finally:
        lib.dk_free(ctypes.cast(items, ctypes.c_void_p))
