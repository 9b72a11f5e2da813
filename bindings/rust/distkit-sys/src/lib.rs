//! Raw declarations of distkit's C ABI, `capi/include/distkit/distkit.h`
//! (ABI 0.2), and of the DLPack structs it takes.
//!
//! Written by hand (no bindgen is reachable offline); `tests/layout.rs`
//! checks every constant, struct size and field offset against the real
//! header, compiled by a C compiler. Ownership and threading rules are the
//! header's: read the comment of each function there.
#![allow(non_camel_case_types, non_upper_case_globals)]
#![no_std]

use core::ffi::{c_char, c_int, c_void};

/// Declares the names as the values 0, 1, 2, ... of the type, in order, as
/// the header's enums number them (tests/layout.rs checks every one).
macro_rules! consecutive {
    ($ty:ty: $($name:ident),+ $(,)?) => {
        consecutive!(@from 0; $ty; $($name),+);
    };
    (@from $n:expr; $ty:ty; $name:ident $(, $rest:ident)*) => {
        pub const $name: $ty = $n;
        consecutive!(@from $n + 1; $ty; $($rest),*);
    };
    (@from $n:expr; $ty:ty;) => {};
}

/// Declares opaque handle types of the header, only ever used behind
/// pointers.
macro_rules! opaque {
    ($($(#[$doc:meta])* $name:ident),+ $(,)?) => {$(
        $(#[$doc])*
        #[repr(C)]
        pub struct $name {
            _private: [u8; 0],
        }
    )+};
}

// ---- DLPack (dlpack.h, version 0.6) ---------------------------------------

pub const kDLCPU: i32 = 1;
pub const kDLCUDA: i32 = 2;
pub const kDLInt: u8 = 0;
pub const kDLUInt: u8 = 1;
pub const kDLFloat: u8 = 2;
pub const kDLBfloat: u8 = 4;

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DLDevice {
    pub device_type: i32,
    pub device_id: c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DLDataType {
    pub code: u8,
    pub bits: u8,
    pub lanes: u16,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct DLTensor {
    pub data: *mut c_void,
    pub device: DLDevice,
    pub ndim: c_int,
    pub dtype: DLDataType,
    pub shape: *mut i64,
    pub strides: *mut i64,
    pub byte_offset: u64,
}

// ---- Versions and errors --------------------------------------------------

pub const DK_ABI_MAJOR: i32 = 0;
pub const DK_ABI_MINOR: i32 = 14;

pub type dk_status_t = i32;

opaque! {
    /// Opaque error object; free with `dk_error_free`.
    dk_error_t
}

consecutive! {
    dk_status_t:
    DK_OK, DK_CANCELLED, DK_UNKNOWN, DK_INVALID_ARGUMENT, DK_DEADLINE_EXCEEDED, DK_NOT_FOUND,
    DK_ALREADY_EXISTS, DK_PERMISSION_DENIED, DK_RESOURCE_EXHAUSTED, DK_FAILED_PRECONDITION,
    DK_ABORTED, DK_OUT_OF_RANGE, DK_UNIMPLEMENTED, DK_INTERNAL, DK_UNAVAILABLE, DK_DATA_LOSS,
    DK_UNAUTHENTICATED,
}

// ---- Data types and reductions --------------------------------------------

pub type dk_dtype_t = i32;
consecutive! {
    dk_dtype_t:
    DK_FLOAT16, DK_BFLOAT16, DK_FLOAT32, DK_FLOAT64, DK_INT8, DK_UINT8, DK_INT32, DK_INT64, DK_BOOL,
}

pub type dk_reduce_op_t = i32;
consecutive! {
    dk_reduce_op_t:
    DK_OP_SUM, DK_OP_PRODUCT, DK_OP_MIN, DK_OP_MAX, DK_OP_BAND, DK_OP_BOR, DK_OP_BXOR, DK_OP_MEAN,
}

// ---- Store ----------------------------------------------------------------

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct dk_bytes_t {
    pub data: *const c_void,
    pub size: usize,
}

opaque! { dk_store_t }

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct dk_store_config_t {
    pub struct_size: usize,
    pub address: *const c_char,
    pub token: *const c_char,
    pub timeout_ms: i64,
    pub connect_timeout_ms: i64,
}

// ---- Launcher (ABI 0.4) ------------------------------------------------------

/// This process's place in the job as the launcher describes it; allocated
/// by the library (dk_launcher_info), freed with one dk_free.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct dk_launcher_info_t {
    pub struct_size: usize,
    pub launcher: *const c_char,
    pub rank: i32,
    pub world_size: i32,
    pub local_rank: i32,
    pub local_world_size: i32,
    pub node_rank: i32,
    pub master_port: i32,
    pub master_addr: *const c_char,
    pub store_address: *const c_char,
    pub hosts_store: i32,
    pub reserved: i32,
}

// ---- Groups and work ------------------------------------------------------

opaque! { dk_group_t }

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct dk_init_config_t {
    pub struct_size: usize,
    pub backend: *const c_char,
    pub timeout_ms: i64,
    /// ABI 0.9; <= 0: `timeout_ms`.
    pub connect_timeout_ms: i64,
}

/// ABI 0.11: what a subgroup sets apart from its parent
/// (`dk_group_new_with_options`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct dk_group_options_t {
    pub struct_size: usize,
    /// Null: collective over the parent, as `dk_group_new`; else made by the
    /// members only, as `dk_group_new_named` with this name.
    pub name: *const c_char,
    /// <= 0: the parent's.
    pub timeout_ms: i64,
    /// <= 0: `timeout_ms`.
    pub connect_timeout_ms: i64,
}

opaque! { dk_work_t }

pub type dk_work_state_t = i32;
consecutive! {
    dk_work_state_t:
    DK_WORK_PENDING, DK_WORK_SUCCEEDED, DK_WORK_FAILED,
}

opaque! { dk_parallel_state_t }

/// modelopt's "-1": a parallel group that is not used.
pub const DK_GROUP_UNUSED: *mut dk_group_t = usize::MAX as *mut dk_group_t;
consecutive! {
    i32:
    DK_PARALLEL_DATA, DK_PARALLEL_TENSOR, DK_PARALLEL_EXPERT,
}

// ---- Gradient reducer (ABI 0.2) ---------------------------------------------

opaque! { dk_reducer_t }

consecutive! {
    i32:
    DK_COMM_HOOK_NONE, DK_COMM_HOOK_FP16, DK_COMM_HOOK_BF16,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct dk_reducer_config_t {
    pub struct_size: usize,
    pub bucket_cap_mb: f64,
    pub first_bucket_cap_mb: f64,
    pub find_unused_parameters: i32,
    pub gradient_as_bucket_view: i32,
    pub broadcast_buffers: i32,
    pub comm_hook: i32,
}

// ---- Sharded units (ABI 0.3) -------------------------------------------------

opaque! { dk_shard_t }

consecutive! {
    i32:
    DK_SHARD_FULL_SHARD, DK_SHARD_SHARD_GRAD_OP, DK_SHARD_NO_SHARD, DK_SHARD_HYBRID_SHARD,
    DK_SHARD_HYBRID_SHARD_ZERO2,
}
pub const DK_DTYPE_UNSET: i32 = -1;
consecutive! {
    i32:
    DK_SHARD_EVENT_UNSHARD_START, DK_SHARD_EVENT_UNSHARD_DONE, DK_SHARD_EVENT_RESHARD,
    DK_SHARD_EVENT_REDUCE_START, DK_SHARD_EVENT_REDUCE_DONE,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct dk_shard_event_t {
    pub unix_ns: i64,
    pub kind: i32,
    pub reserved: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct dk_shard_config_t {
    pub struct_size: usize,
    pub strategy: i32,
    pub param_dtype: i32,
    pub reduce_dtype: i32,
    pub offload_params: i32,
    pub sync_module_states: i32,
    pub reserved: i32,
    pub replicate_group: *mut dk_group_t,
    /// ABI 0.13: NULL, or a flag per parameter (nonzero: takes no gradient).
    pub frozen: *const i32,
}

pub type ErrOut = *mut *mut dk_error_t;
pub type WorkOut = *mut *mut dk_work_t;
/// Called once when a work's operation finishes (`dk_work_on_complete`).
pub type dk_work_callback_t = Option<unsafe extern "C" fn(arg: *mut c_void, status: dk_status_t)>;

// ---- Elastic snapshots (ABI 0.8) ---------------------------------------------

opaque! { dk_snapshot_t }

// ---- Sharded elastic snapshots (ABI 0.10) ------------------------------------

opaque! { dk_sharded_snapshot_t }

extern "C" {
    pub fn dk_init_version(major: i32, minor: i32, err: ErrOut) -> dk_status_t;
    pub fn dk_get_version(major: *mut i32, minor: *mut i32);

    pub fn dk_error_code(err: *const dk_error_t) -> dk_status_t;
    pub fn dk_error_message(err: *const dk_error_t) -> *const c_char;
    pub fn dk_error_free(err: *mut dk_error_t);
    pub fn dk_free(ptr: *mut c_void);

    /// ABI 0.13: fills `size` bytes (`size_of::<dk_store_config_t>()`).
    pub fn dk_store_config_init_sized(config: *mut dk_store_config_t, size: usize);
    pub fn dk_store_config_init(config: *mut dk_store_config_t);
    pub fn dk_store_connect(
        config: *const dk_store_config_t,
        out: *mut *mut dk_store_t,
        err: ErrOut,
    ) -> dk_status_t;
    pub fn dk_store_serve(
        config: *const dk_store_config_t,
        out: *mut *mut dk_store_t,
        err: ErrOut,
    ) -> dk_status_t;
    pub fn dk_default_store(out: *mut *mut dk_store_t, err: ErrOut) -> dk_status_t;
    pub fn dk_store_address(store: *const dk_store_t) -> *const c_char;
    pub fn dk_store_destroy(store: *mut dk_store_t);
    pub fn dk_store_set(
        store: *mut dk_store_t,
        key: *const c_char,
        value: *const c_void,
        size: usize,
        err: ErrOut,
    ) -> dk_status_t;
    pub fn dk_store_get(
        store: *mut dk_store_t,
        key: *const c_char,
        value_out: *mut *mut c_void,
        size_out: *mut usize,
        err: ErrOut,
    ) -> dk_status_t;
    pub fn dk_store_add(
        store: *mut dk_store_t,
        key: *const c_char,
        delta: i64,
        out: *mut i64,
        err: ErrOut,
    ) -> dk_status_t;
    pub fn dk_store_wait(
        store: *mut dk_store_t,
        keys: *const *const c_char,
        num_keys: usize,
        timeout_ms: i64,
        err: ErrOut,
    ) -> dk_status_t;
    pub fn dk_store_check(
        store: *mut dk_store_t,
        keys: *const *const c_char,
        num_keys: usize,
        out: *mut i32,
        err: ErrOut,
    ) -> dk_status_t;
    pub fn dk_store_delete_key(
        store: *mut dk_store_t,
        key: *const c_char,
        out: *mut i32,
        err: ErrOut,
    ) -> dk_status_t;
    pub fn dk_store_compare_set(
        store: *mut dk_store_t,
        key: *const c_char,
        expected: *const c_void,
        expected_size: usize,
        desired: *const c_void,
        desired_size: usize,
        value_out: *mut *mut c_void,
        size_out: *mut usize,
        err: ErrOut,
    ) -> dk_status_t;
    pub fn dk_store_append(
        store: *mut dk_store_t,
        key: *const c_char,
        value: *const c_void,
        size: usize,
        err: ErrOut,
    ) -> dk_status_t;
    pub fn dk_store_multi_set(
        store: *mut dk_store_t,
        keys: *const *const c_char,
        values: *const dk_bytes_t,
        num_keys: usize,
        err: ErrOut,
    ) -> dk_status_t;
    pub fn dk_store_multi_get(
        store: *mut dk_store_t,
        keys: *const *const c_char,
        num_keys: usize,
        values_out: *mut *mut dk_bytes_t,
        err: ErrOut,
    ) -> dk_status_t;
    pub fn dk_store_num_keys(store: *mut dk_store_t, out: *mut i64, err: ErrOut) -> dk_status_t;

    pub fn dk_launcher_infer() -> *const c_char;
    pub fn dk_launcher_info(
        launcher: *const c_char,
        out: *mut *mut dk_launcher_info_t,
        err: ErrOut,
    ) -> dk_status_t;

    /// ABI 0.13: fills `size` bytes (`size_of::<dk_init_config_t>()`).
    pub fn dk_init_config_init_sized(config: *mut dk_init_config_t, size: usize);
    pub fn dk_init_config_init(config: *mut dk_init_config_t);
    pub fn dk_init(
        launcher: *const c_char,
        config: *const dk_init_config_t,
        world_out: *mut *mut dk_group_t,
        err: ErrOut,
    ) -> dk_status_t;
    pub fn dk_init_with_store(
        store: *mut dk_store_t,
        rank: i32,
        size: i32,
        config: *const dk_init_config_t,
        world_out: *mut *mut dk_group_t,
        err: ErrOut,
    ) -> dk_status_t;
    pub fn dk_shutdown();
    pub fn dk_is_distributed() -> i32;
    pub fn dk_group_rank(group: *const dk_group_t) -> i32;
    pub fn dk_group_size(group: *const dk_group_t) -> i32;
    pub fn dk_group_backend(group: *const dk_group_t) -> *const c_char;
    pub fn dk_group_global_rank(group: *const dk_group_t, group_rank: i32) -> i32;
    pub fn dk_group_name(group: *const dk_group_t) -> *const c_char;
    pub fn dk_group_new(
        parent: *mut dk_group_t,
        ranks: *const i32,
        num_ranks: usize,
        out: *mut *mut dk_group_t,
        err: ErrOut,
    ) -> dk_status_t;
    pub fn dk_group_new_named(
        parent: *mut dk_group_t,
        ranks: *const i32,
        num_ranks: usize,
        name: *const c_char,
        out: *mut *mut dk_group_t,
        err: ErrOut,
    ) -> dk_status_t;
    /// ABI 0.13: fills `size` bytes (`size_of::<dk_group_options_t>()`).
    pub fn dk_group_options_init_sized(options: *mut dk_group_options_t, size: usize);
    pub fn dk_group_options_init(options: *mut dk_group_options_t);
    pub fn dk_group_new_with_options(
        parent: *mut dk_group_t,
        ranks: *const i32,
        num_ranks: usize,
        options: *const dk_group_options_t,
        out: *mut *mut dk_group_t,
        err: ErrOut,
    ) -> dk_status_t;
    pub fn dk_group_destroy(group: *mut dk_group_t);
    pub fn dk_group_abort(group: *mut dk_group_t);
    pub fn dk_group_shrink(
        group: *mut dk_group_t,
        settle_ms: i64,
        out: *mut *mut dk_group_t,
        err: ErrOut,
    ) -> dk_status_t;
    pub fn dk_group_grow(
        group: *mut dk_group_t,
        world_size: i32,
        timeout_ms: i64,
        out: *mut *mut dk_group_t,
        err: ErrOut,
    ) -> dk_status_t;
    pub fn dk_group_grow_pending(
        group: *mut dk_group_t,
        pending: *mut i32,
        err: ErrOut,
    ) -> dk_status_t;
    pub fn dk_group_async_error(group: *const dk_group_t, err: ErrOut) -> dk_status_t;

    pub fn dk_work_test(
        work: *const dk_work_t,
        state_out: *mut dk_work_state_t,
        err: ErrOut,
    ) -> dk_status_t;
    pub fn dk_work_wait(work: *mut dk_work_t, timeout_ms: i64, err: ErrOut) -> dk_status_t;
    pub fn dk_work_destroy(work: *mut dk_work_t);
    pub fn dk_work_on_complete(
        work: *mut dk_work_t,
        callback: dk_work_callback_t,
        arg: *mut c_void,
        err: ErrOut,
    ) -> dk_status_t;

    pub fn dk_group_all_reduce(
        group: *mut dk_group_t,
        data: *mut DLTensor,
        op: dk_reduce_op_t,
        work_out: WorkOut,
        err: ErrOut,
    ) -> dk_status_t;
    pub fn dk_group_broadcast(
        group: *mut dk_group_t,
        data: *mut DLTensor,
        root: i32,
        work_out: WorkOut,
        err: ErrOut,
    ) -> dk_status_t;
    pub fn dk_group_reduce(
        group: *mut dk_group_t,
        data: *mut DLTensor,
        op: dk_reduce_op_t,
        root: i32,
        work_out: WorkOut,
        err: ErrOut,
    ) -> dk_status_t;
    pub fn dk_group_all_gather(
        group: *mut dk_group_t,
        input: *const DLTensor,
        output: *mut DLTensor,
        work_out: WorkOut,
        err: ErrOut,
    ) -> dk_status_t;
    pub fn dk_group_gather(
        group: *mut dk_group_t,
        input: *const DLTensor,
        output: *mut DLTensor,
        root: i32,
        work_out: WorkOut,
        err: ErrOut,
    ) -> dk_status_t;
    pub fn dk_group_scatter(
        group: *mut dk_group_t,
        input: *const DLTensor,
        output: *mut DLTensor,
        root: i32,
        work_out: WorkOut,
        err: ErrOut,
    ) -> dk_status_t;
    pub fn dk_group_reduce_scatter(
        group: *mut dk_group_t,
        input: *const DLTensor,
        output: *mut DLTensor,
        op: dk_reduce_op_t,
        work_out: WorkOut,
        err: ErrOut,
    ) -> dk_status_t;
    pub fn dk_group_all_to_all(
        group: *mut dk_group_t,
        input: *const DLTensor,
        input_splits: *const i64,
        output: *mut DLTensor,
        output_splits: *const i64,
        num_splits: usize,
        work_out: WorkOut,
        err: ErrOut,
    ) -> dk_status_t;
    pub fn dk_group_barrier(group: *mut dk_group_t, work_out: WorkOut, err: ErrOut) -> dk_status_t;
    pub fn dk_group_send(
        group: *mut dk_group_t,
        data: *const DLTensor,
        dst: i32,
        tag: i32,
        work_out: WorkOut,
        err: ErrOut,
    ) -> dk_status_t;
    pub fn dk_group_recv(
        group: *mut dk_group_t,
        data: *mut DLTensor,
        src: i32,
        tag: i32,
        work_out: WorkOut,
        err: ErrOut,
    ) -> dk_status_t;

    pub fn dk_init_local_group(node_rank: i32, num_per_node: i32, err: ErrOut) -> dk_status_t;
    pub fn dk_init_local_group_from_launcher(err: ErrOut) -> dk_status_t;
    pub fn dk_local_group(out: *mut *mut dk_group_t, err: ErrOut) -> dk_status_t;

    pub fn dk_group_all_reduce_coalesced(
        group: *mut dk_group_t,
        tensors: *const *mut DLTensor,
        num_tensors: usize,
        op: dk_reduce_op_t,
        coalesce: i32,
        bucket_size_mb: i64,
        err: ErrOut,
    ) -> dk_status_t;
    pub fn dk_group_sync_random_seed(group: *mut dk_group_t, out: *mut i32, err: ErrOut) -> dk_status_t;
    pub fn dk_group_all_gather_object(
        group: *mut dk_group_t,
        data: *const c_void,
        size: usize,
        items_out: *mut *mut dk_bytes_t,
        count_out: *mut usize,
        err: ErrOut,
    ) -> dk_status_t;
    pub fn dk_group_gather_object(
        group: *mut dk_group_t,
        data: *const c_void,
        size: usize,
        dst: i32,
        items_out: *mut *mut dk_bytes_t,
        count_out: *mut usize,
        err: ErrOut,
    ) -> dk_status_t;
    pub fn dk_group_broadcast_object_list(
        group: *mut dk_group_t,
        items: *const dk_bytes_t,
        count: usize,
        src: i32,
        items_out: *mut *mut dk_bytes_t,
        count_out: *mut usize,
        err: ErrOut,
    ) -> dk_status_t;
    pub fn dk_group_collect_results(
        group: *mut dk_group_t,
        part: *const dk_bytes_t,
        part_count: usize,
        size: i64,
        device: *const c_char,
        tmpdir: *const c_char,
        items_out: *mut *mut dk_bytes_t,
        count_out: *mut usize,
        err: ErrOut,
    ) -> dk_status_t;

    /// ABI 0.14: the issuer a thread's calls count as (convention 13).
    pub fn dk_issuer_new() -> u32;
    pub fn dk_issuer_set(issuer: u32) -> u32;

    pub fn dk_get_device(out: *mut DLDevice);
    pub fn dk_group_comm_device(
        group: *const dk_group_t,
        out: *mut DLDevice,
        err: ErrOut,
    ) -> dk_status_t;
    pub fn dk_group_set_cuda_stream(
        group: *mut dk_group_t,
        stream: *mut c_void,
        err: ErrOut,
    ) -> dk_status_t;
    pub fn dk_tensor_copy(src: *const DLTensor, dst: *mut DLTensor, err: ErrOut) -> dk_status_t;

    /// ABI 0.13: fills `size` bytes (`size_of::<dk_reducer_config_t>()`).
    pub fn dk_reducer_config_init_sized(config: *mut dk_reducer_config_t, size: usize);
    pub fn dk_reducer_config_init(config: *mut dk_reducer_config_t);
    pub fn dk_reducer_create(
        group: *mut dk_group_t,
        params: *const *mut DLTensor,
        num_params: usize,
        buffers: *const *mut DLTensor,
        num_buffers: usize,
        config: *const dk_reducer_config_t,
        out: *mut *mut dk_reducer_t,
        err: ErrOut,
    ) -> dk_status_t;
    pub fn dk_reducer_destroy(reducer: *mut dk_reducer_t);
    pub fn dk_reducer_prepare(reducer: *mut dk_reducer_t, unused: *const i32, num_unused: usize, err: ErrOut) -> dk_status_t;
    pub fn dk_reducer_mark_ready(reducer: *mut dk_reducer_t, index: i32, grad: *const DLTensor, err: ErrOut) -> dk_status_t;
    pub fn dk_reducer_finalize(reducer: *mut dk_reducer_t, err: ErrOut) -> dk_status_t;
    /// ABI 0.12: ends an iteration whose backward failed, without finalizing it.
    pub fn dk_reducer_abandon(reducer: *mut dk_reducer_t, err: ErrOut) -> dk_status_t;
    pub fn dk_reducer_set_require_sync(reducer: *mut dk_reducer_t, require_sync: i32);
    pub fn dk_reducer_broadcast_buffers(reducer: *mut dk_reducer_t, err: ErrOut) -> dk_status_t;
    pub fn dk_reducer_grad_view(reducer: *mut dk_reducer_t, index: i32, data_out: *mut *mut c_void, err: ErrOut) -> dk_status_t;
    pub fn dk_reducer_view_generation(reducer: *const dk_reducer_t) -> i64;
    pub fn dk_reducer_reduced_grad(reducer: *mut dk_reducer_t, index: i32, data_out: *mut *mut c_void, err: ErrOut) -> dk_status_t;
    pub fn dk_reducer_globally_used(reducer: *const dk_reducer_t, index: i32) -> i32;
    pub fn dk_reducer_num_buckets(reducer: *const dk_reducer_t) -> i32;

    pub fn dk_parallel_state_create(
        data_parallel: *mut dk_group_t,
        tensor_parallel: *mut dk_group_t,
        expert_parallel: *mut dk_group_t,
        out: *mut *mut dk_parallel_state_t,
        err: ErrOut,
    ) -> dk_status_t;
    pub fn dk_parallel_state_destroy(state: *mut dk_parallel_state_t);
    pub fn dk_parallel_state_rank(state: *const dk_parallel_state_t, which: i32) -> i32;
    pub fn dk_parallel_state_size(state: *const dk_parallel_state_t, which: i32) -> i32;
    pub fn dk_parallel_state_describe(
        state: *const dk_parallel_state_t,
        out: *mut *mut c_char,
        err: ErrOut,
    ) -> dk_status_t;

    /// ABI 0.13: fills `size` bytes (`size_of::<dk_shard_config_t>()`).
    pub fn dk_shard_config_init_sized(config: *mut dk_shard_config_t, size: usize);
    pub fn dk_shard_config_init(config: *mut dk_shard_config_t);
    pub fn dk_shard_create(
        group: *mut dk_group_t,
        params: *const *mut DLTensor,
        num_params: usize,
        names: *const *const c_char,
        config: *const dk_shard_config_t,
        out: *mut *mut dk_shard_t,
        err: ErrOut,
    ) -> dk_status_t;
    pub fn dk_shard_destroy(shard: *mut dk_shard_t);
    pub fn dk_shard_unshard_start(shard: *mut dk_shard_t, err: ErrOut) -> dk_status_t;
    pub fn dk_shard_unshard_wait(shard: *mut dk_shard_t, err: ErrOut) -> dk_status_t;
    pub fn dk_shard_unshard(shard: *mut dk_shard_t, err: ErrOut) -> dk_status_t;
    pub fn dk_shard_reshard(shard: *mut dk_shard_t, err: ErrOut) -> dk_status_t;
    pub fn dk_shard_full_param(shard: *mut dk_shard_t, index: i32, data_out: *mut *mut c_void, err: ErrOut) -> dk_status_t;
    pub fn dk_shard_accumulate_grad(shard: *mut dk_shard_t, index: i32, grad: *const DLTensor, err: ErrOut) -> dk_status_t;
    pub fn dk_shard_full_grad(shard: *mut dk_shard_t, index: i32, data_out: *mut *mut c_void, err: ErrOut) -> dk_status_t;
    pub fn dk_shard_reduce_grads(shard: *mut dk_shard_t, err: ErrOut) -> dk_status_t;
    pub fn dk_shard_reduce_grads_start(shard: *mut dk_shard_t, err: ErrOut) -> dk_status_t;
    pub fn dk_shard_reduce_grads_wait(shard: *mut dk_shard_t, err: ErrOut) -> dk_status_t;
    pub fn dk_shard_set_require_sync(shard: *mut dk_shard_t, require_sync: i32);
    pub fn dk_shard_num_flat(shard: *const dk_shard_t) -> i32;
    pub fn dk_shard_local(
        shard: *mut dk_shard_t,
        flat: i32,
        data_out: *mut *mut c_void,
        grad_out: *mut *mut c_void,
        numel_out: *mut i64,
        dtype_out: *mut dk_dtype_t,
        err: ErrOut,
    ) -> dk_status_t;
    pub fn dk_shard_zero_grads(shard: *mut dk_shard_t);
    pub fn dk_shard_piece(
        shard: *mut dk_shard_t,
        index: i32,
        offset_out: *mut i64,
        numel_out: *mut i64,
        data_out: *mut *mut c_void,
        grad_out: *mut *mut c_void,
        err: ErrOut,
    ) -> dk_status_t;
    pub fn dk_shard_gather_full(shard: *mut dk_shard_t, outs: *const *mut DLTensor, n: usize, rank0_only: i32, err: ErrOut) -> dk_status_t;
    pub fn dk_shard_load_full(shard: *mut dk_shard_t, values: *const *mut DLTensor, n: usize, rank0_only: i32, err: ErrOut) -> dk_status_t;
    pub fn dk_shard_load_sharded(
        shard: *mut dk_shard_t,
        saved_world_size: i32,
        saved: *const *const DLTensor,
        num_saved: usize,
        err: ErrOut,
    ) -> dk_status_t;
    pub fn dk_shard_held_bytes(shard: *const dk_shard_t) -> i64;
    pub fn dk_shard_peak_held_bytes(shard: *const dk_shard_t) -> i64;
    pub fn dk_shard_take_events(
        shard: *mut dk_shard_t,
        out: *mut dk_shard_event_t,
        capacity: usize,
        count: *mut usize,
        err: ErrOut,
    ) -> dk_status_t;

    pub fn dk_snapshot_create(out: *mut *mut dk_snapshot_t, err: ErrOut) -> dk_status_t;
    pub fn dk_snapshot_destroy(snapshot: *mut dk_snapshot_t);
    pub fn dk_snapshot_register(
        snapshot: *mut dk_snapshot_t,
        name: *const c_char,
        data: *mut c_void,
        bytes: usize,
        err: ErrOut,
    ) -> dk_status_t;
    pub fn dk_snapshot_commit(snapshot: *mut dk_snapshot_t, err: ErrOut) -> dk_status_t;
    pub fn dk_snapshot_sync(
        snapshot: *mut dk_snapshot_t,
        group: *mut dk_group_t,
        commit_out: *mut i64,
        err: ErrOut,
    ) -> dk_status_t;
    pub fn dk_snapshot_restore(snapshot: *mut dk_snapshot_t, err: ErrOut) -> dk_status_t;
    pub fn dk_snapshot_commit_number(snapshot: *const dk_snapshot_t) -> i64;
    pub fn dk_snapshot_bytes(snapshot: *const dk_snapshot_t) -> i64;

    pub fn dk_sharded_snapshot_create(out: *mut *mut dk_sharded_snapshot_t, err: ErrOut) -> dk_status_t;
    pub fn dk_sharded_snapshot_destroy(snapshot: *mut dk_sharded_snapshot_t);
    pub fn dk_sharded_snapshot_register(
        snapshot: *mut dk_sharded_snapshot_t,
        name: *const c_char,
        data: *mut c_void,
        bytes: usize,
        err: ErrOut,
    ) -> dk_status_t;
    pub fn dk_sharded_snapshot_commit(
        snapshot: *mut dk_sharded_snapshot_t,
        group: *mut dk_group_t,
        err: ErrOut,
    ) -> dk_status_t;
    pub fn dk_sharded_snapshot_fetch(
        snapshot: *mut dk_sharded_snapshot_t,
        group: *mut dk_group_t,
        wanted: *const i32,
        num_wanted: usize,
        commit_out: *mut i64,
        world_out: *mut i32,
        err: ErrOut,
    ) -> dk_status_t;
    pub fn dk_sharded_snapshot_shard(
        snapshot: *const dk_sharded_snapshot_t,
        index: i32,
        buffer: i32,
        data_out: *mut *const c_void,
        bytes_out: *mut usize,
        err: ErrOut,
    ) -> dk_status_t;
    pub fn dk_sharded_snapshot_commit_number(snapshot: *const dk_sharded_snapshot_t) -> i64;
    pub fn dk_sharded_snapshot_bytes(snapshot: *const dk_sharded_snapshot_t) -> i64;
}
