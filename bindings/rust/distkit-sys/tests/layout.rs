//! Checks src/lib.rs against the real distkit.h: every constant, struct size
//! and field offset (printed by tests/layout_probe.c, compiled by a C
//! compiler), and that every function the header exports is declared.
//!
//! Under Cargo the probe is compiled with `cc` (override with CC); set
//! DISTKIT_INCLUDE_DIR if the header is not at ../../../capi/include. Under
//! Bazel, DISTKIT_LAYOUT_PROBE names the prebuilt probe and DISTKIT_HEADER
//! the header.
use std::collections::BTreeMap;
use std::mem::{offset_of, size_of};
use std::path::PathBuf;
use std::process::Command;

use distkit_sys::*;

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn include_dir() -> PathBuf {
    std::env::var_os("DISTKIT_INCLUDE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest_dir().join("../../../capi/include"))
}

fn probe_output() -> String {
    let probe = match std::env::var_os("DISTKIT_LAYOUT_PROBE") {
        Some(p) => PathBuf::from(p),
        None => {
            let out = std::env::temp_dir().join(format!("dk_layout_probe_{}", std::process::id()));
            let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
            let status = Command::new(&cc)
                .arg("-std=c11")
                .arg("-I")
                .arg(include_dir())
                .arg(manifest_dir().join("tests/layout_probe.c"))
                .arg("-o")
                .arg(&out)
                .status()
                .unwrap_or_else(|e| panic!("cannot run {cc}: {e}"));
            assert!(status.success(), "compiling tests/layout_probe.c failed");
            out
        }
    };
    let output = Command::new(&probe).output().expect("run the layout probe");
    assert!(output.status.success());
    String::from_utf8(output.stdout).unwrap()
}

fn rust_values() -> Vec<(&'static str, i64)> {
    macro_rules! v {
        ($($name:ident),* $(,)?) => { vec![$((stringify!($name), $name as i64)),*] };
    }
    let mut values = v![
        DK_ABI_MAJOR, DK_ABI_MINOR, DK_OK, DK_CANCELLED, DK_UNKNOWN, DK_INVALID_ARGUMENT,
        DK_DEADLINE_EXCEEDED, DK_NOT_FOUND, DK_ALREADY_EXISTS, DK_PERMISSION_DENIED,
        DK_RESOURCE_EXHAUSTED, DK_FAILED_PRECONDITION, DK_ABORTED, DK_OUT_OF_RANGE,
        DK_UNIMPLEMENTED, DK_INTERNAL, DK_UNAVAILABLE, DK_DATA_LOSS, DK_UNAUTHENTICATED,
        DK_FLOAT16, DK_BFLOAT16, DK_FLOAT32, DK_FLOAT64, DK_INT8, DK_UINT8, DK_INT32,
        DK_INT64, DK_BOOL, DK_OP_SUM, DK_OP_PRODUCT, DK_OP_MIN, DK_OP_MAX, DK_OP_BAND,
        DK_OP_BOR, DK_OP_BXOR, DK_OP_MEAN, DK_WORK_PENDING, DK_WORK_SUCCEEDED,
        DK_WORK_FAILED, DK_PARALLEL_DATA, DK_PARALLEL_TENSOR, DK_PARALLEL_EXPERT, kDLCPU,
        kDLCUDA, kDLInt, kDLUInt, kDLFloat, kDLBfloat, DK_COMM_HOOK_NONE, DK_COMM_HOOK_FP16,
        DK_COMM_HOOK_BF16, DK_SHARD_FULL_SHARD, DK_SHARD_SHARD_GRAD_OP, DK_SHARD_NO_SHARD,
        DK_SHARD_HYBRID_SHARD, DK_SHARD_HYBRID_SHARD_ZERO2, DK_DTYPE_UNSET,
        DK_SHARD_EVENT_UNSHARD_START, DK_SHARD_EVENT_UNSHARD_DONE, DK_SHARD_EVENT_RESHARD,
        DK_SHARD_EVENT_REDUCE_START, DK_SHARD_EVENT_REDUCE_DONE,
    ];
    values.push(("(intptr_t)DK_GROUP_UNUSED", DK_GROUP_UNUSED as isize as i64));
    values.push(("sizeof(dk_status_t)", size_of::<dk_status_t>() as i64));
    values.push(("sizeof(dk_dtype_t)", size_of::<dk_dtype_t>() as i64));
    values.push(("sizeof(dk_reduce_op_t)", size_of::<dk_reduce_op_t>() as i64));
    values.push(("sizeof(dk_work_state_t)", size_of::<dk_work_state_t>() as i64));
    macro_rules! layout {
        ($t:ident: $($f:ident),*) => {
            values.push((concat!("sizeof(", stringify!($t), ")"), size_of::<$t>() as i64));
            $(values.push((
                concat!("offsetof(", stringify!($t), ".", stringify!($f), ")"),
                offset_of!($t, $f) as i64,
            ));)*
        };
    }
    layout!(DLDevice: device_type, device_id);
    layout!(DLDataType: code, bits, lanes);
    layout!(DLTensor: data, device, ndim, dtype, shape, strides, byte_offset);
    layout!(dk_bytes_t: data, size);
    layout!(dk_store_config_t: struct_size, address, token, timeout_ms, connect_timeout_ms);
    layout!(dk_init_config_t: struct_size, backend, timeout_ms, connect_timeout_ms);
    layout!(dk_group_options_t: struct_size, name, timeout_ms, connect_timeout_ms);
    layout!(dk_reducer_config_t: struct_size, bucket_cap_mb, first_bucket_cap_mb,
            find_unused_parameters, gradient_as_bucket_view, broadcast_buffers, comm_hook);
    layout!(dk_shard_config_t: struct_size, strategy, param_dtype, reduce_dtype, offload_params,
            sync_module_states, reserved, replicate_group, frozen);
    layout!(dk_shard_event_t: unix_ns, kind, reserved);
    layout!(dk_launcher_info_t: struct_size, launcher, rank, world_size, local_rank,
            local_world_size, node_rank, master_port, master_addr, store_address, hosts_store,
            reserved);
    values
}

#[test]
fn constants_and_layouts_match_the_header() {
    let c: BTreeMap<String, i64> = probe_output()
        .lines()
        .map(|line| {
            let (name, value) = line.rsplit_once(' ').expect("NAME VALUE");
            (name.to_string(), value.parse().expect("a number"))
        })
        .collect();
    let rust = rust_values();
    assert_eq!(c.len(), rust.len(), "the probe and the test list different items");
    for (name, value) in rust {
        assert_eq!(c.get(name), Some(&value), "{name}: C says {:?}, Rust says {value}", c.get(name));
    }
}

#[test]
fn every_exported_function_is_declared() {
    let header_path = std::env::var_os("DISTKIT_HEADER")
        .map(PathBuf::from)
        .unwrap_or_else(|| include_dir().join("distkit/distkit.h"));
    let header = std::fs::read_to_string(&header_path).expect("read distkit.h");
    let rust = include_str!("../src/lib.rs");
    let mut count = 0;
    for decl in header.split("DK_EXPORT").skip(1) {
        // "dk_status_t dk_store_set(..." -> "dk_store_set"
        let before_paren = decl.split('(').next().unwrap();
        let name = before_paren.split_whitespace().last().unwrap().trim_start_matches('*');
        if !name.starts_with("dk_") {
            continue; // the #define of DK_EXPORT itself
        }
        count += 1;
        let params_c = decl.split('(').nth(1).unwrap().split(')').next().unwrap();
        let arity_c = if params_c.trim() == "void" { 0 } else { params_c.split(',').count() };
        let needle = format!("pub fn {name}(");
        let at = rust.find(&needle).unwrap_or_else(|| panic!("{name} is not declared in src/lib.rs"));
        let params_rs = rust[at + needle.len()..].split(')').next().unwrap();
        let arity_rs = params_rs.split(',').filter(|p| !p.trim().is_empty()).count();
        assert_eq!(arity_c, arity_rs, "{name}: the header has {arity_c} parameters, Rust {arity_rs}");
    }
    assert!(count > 60, "only {count} exported functions found in {}", header_path.display());
}
