//! distkit for Rust: join a distributed job (the same job as C, C++, Python
//! and Go ranks), and run collectives on slices.
//!
//! ```no_run
//! let world = distkit::init("pytorch", &distkit::InitOptions::default())?;
//! let mut grads = vec![1.0f32; 1024];
//! world.all_reduce(&mut grads, distkit::ReduceOp::Sum)?;
//! # Ok::<(), distkit::Error>(())
//! ```
//!
//! Every call goes through the C ABI in `libdistkit.so` (see README.md for
//! how to build and find it). Errors carry the ABI's status code.
mod abi_memory;
mod device;
mod element;
mod error;
mod group;
mod half;
mod launcher;
mod reducer;
mod shard;
mod sharded_snapshot;
mod snapshot;
mod store;

use std::sync::OnceLock;
use std::time::Duration;

use distkit_sys as sys;

pub use device::{device, Device, DeviceSlice};
pub use element::{DataType, Element};
pub use error::{Code, Error, Result};
pub use group::{AbortHandle, Group, GroupOptions, ReduceOp, Scope, Work};
pub use half::{BF16, F16};
pub use launcher::{infer_launcher, launcher_info, LauncherInfo};
pub use reducer::{CommHook, Reducer, ReducerOptions};
pub use shard::{Shard, ShardEvent, ShardEventKind, ShardOptions, ShardingStrategy};
pub use sharded_snapshot::{Fetched, ShardedSnapshot};
pub use snapshot::{PlainNumber, Snapshot, SnapshotBuffer};
pub use store::{Store, StoreOptions};

/// Checks once that the loaded library can serve this binding's header.
pub fn check_version() -> Result<()> {
    static CHECKED: OnceLock<Result<()>> = OnceLock::new();
    CHECKED
        .get_or_init(|| error::call(|err| unsafe { sys::dk_init_version(sys::DK_ABI_MAJOR, sys::DK_ABI_MINOR, err) }))
        .clone()
}

/// The ABI version (major, minor) of the loaded library, which may be newer
/// than the header this binding was written for (`check_version` accepts
/// that).
pub fn library_version() -> (i32, i32) {
    let (mut major, mut minor) = (0, 0);
    unsafe { sys::dk_get_version(&mut major, &mut minor) };
    (major, minor)
}

/// Options of `init` and `init_with_store`.
#[derive(Clone, Debug)]
pub struct InitOptions {
    /// "gloo" (the default).
    pub backend: String,
    /// Per collective.
    pub timeout: Duration,
    /// How long init waits for the job's ranks to join and connect; `None`
    /// (or zero): `timeout`. A job may start slowly and still fail its collectives fast.
    pub connect_timeout: Option<Duration>,
}

impl Default for InitOptions {
    fn default() -> Self {
        InitOptions { backend: "gloo".to_string(), timeout: Duration::from_secs(1800), connect_timeout: None }
    }
}

/// A caller's duration in the ABI's whole milliseconds, for every `*_ms` field
/// and argument the crate fills: 0 for zero; a positive duration at least 1
/// (one under a millisecond truncated to 0 would mean a default, e.g. 30
/// minutes, the opposite of what was asked); at most `i64::MAX`. `None` and
/// other defaults are each caller's (`Option::map_or`).
pub(crate) fn millis(d: Duration) -> i64 {
    if d.is_zero() {
        0
    } else {
        d.as_millis().clamp(1, i64::MAX as u128) as i64
    }
}

fn with_config<R>(options: &InitOptions, f: impl FnOnce(&sys::dk_init_config_t) -> Result<R>) -> Result<R> {
    let backend = store::cstring(&options.backend, "backend")?;
    let mut config = unsafe {
        let mut c = std::mem::zeroed::<sys::dk_init_config_t>();
        let size = std::mem::size_of::<sys::dk_init_config_t>();
        sys::dk_init_config_init_sized(&mut c, size);
        c
    };
    config.backend = backend.as_ptr();
    config.timeout_ms = millis(options.timeout);
    // None or zero, as in C, means the op timeout.
    config.connect_timeout_ms = options.connect_timeout.map_or(0, millis);
    f(&config)
}

/// Collective over the job: joins it as the launcher's environment describes
/// ("pytorch" for torchrun and distrun, "slurm", "mpi", "distrun"). The world
/// group is also the process's default group until `shutdown`. In a process
/// started in place of a lost rank (`DISTKIT_REPLACEMENT=<n>`, set by
/// `distrun --max-replacements`) it joins the survivors' `Group::grow` instead
/// of the world's rendezvous, and the world it returns is the grown group.
pub fn init(launcher: &str, options: &InitOptions) -> Result<Group> {
    check_version()?;
    let launcher = store::cstring(launcher, "launcher")?;
    with_config(options, |config| {
        let mut world = std::ptr::null_mut();
        error::call(|err| unsafe { sys::dk_init(launcher.as_ptr(), config, &mut world, err) })?;
        Ok(Group::from_raw(world, None))
    })
}

/// Collective, like `init`, with an explicit rank, size and store.
pub fn init_with_store(store: &Store, rank: i32, size: i32, options: &InitOptions) -> Result<Group> {
    check_version()?;
    with_config(options, |config| {
        let mut world = std::ptr::null_mut();
        error::call(|err| unsafe { sys::dk_init_with_store(store.raw(), rank, size, config, &mut world, err) })?;
        Ok(Group::from_raw(world, Some(store.clone())))
    })
}

/// Forgets the default group (groups stay valid until dropped).
pub fn shutdown() {
    unsafe { sys::dk_shutdown() }
}

/// Whether `init` succeeded (and `shutdown` was not called since).
pub fn is_distributed() -> bool {
    unsafe { sys::dk_is_distributed() != 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn millis_rounds_sub_millisecond_up() {
        assert_eq!(millis(Duration::ZERO), 0);
        assert_eq!(millis(Duration::from_nanos(1)), 1);
        assert_eq!(millis(Duration::from_micros(500)), 1);
        assert_eq!(millis(Duration::from_micros(1500)), 1);
        assert_eq!(millis(Duration::from_secs(2)), 2000);
        assert_eq!(millis(Duration::MAX), i64::MAX);
    }
}
