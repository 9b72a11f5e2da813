//! The launcher's view of this process (torchrun, Slurm, mpirun, distrun),
//! read by the library exactly as `init` reads it, so every language sees
//! the same job.
use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_void};

use distkit_sys as sys;

use crate::error::{call, Result};
use crate::store::cstring;

/// This process's place in the job as its launcher describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LauncherInfo {
    /// "none", "pytorch", "slurm", "mpi" or "distrun".
    pub launcher: String,
    pub rank: i32,
    pub world_size: i32,
    pub local_rank: i32,
    pub local_world_size: i32,
    /// GROUP_RANK, SLURM_NODEID; under mpirun, rank / local world size
    /// where ranks lie in one block per node (its default mapping), else -1.
    pub node_rank: i32,
    /// Empty when the launcher names none (Slurm: the first host of
    /// SLURM_NODELIST unless MASTER_ADDR is set).
    pub master_addr: String,
    /// 0 when the launcher names none.
    pub master_port: i32,
    /// "host:port" `init` joins through; empty when none.
    pub store_address: String,
    /// Whether `init` makes this rank serve the store.
    pub hosts_store: bool,
}

/// The launcher the environment names (mmengine's infer_launcher):
/// "pytorch" (WORLD_SIZE set), "slurm", "mpi" or "none".
pub fn infer_launcher() -> String {
    unsafe { text(sys::dk_launcher_infer()) }
}

/// Reads `launcher`'s variables (None: `infer_launcher`'s) as `init` does.
/// A missing or malformed variable is `Code::InvalidArgument` naming it.
pub fn launcher_info(launcher: Option<&str>) -> Result<LauncherInfo> {
    let name: Option<CString> = launcher.map(|l| cstring(l, "launcher")).transpose()?;
    let mut out: *mut sys::dk_launcher_info_t = std::ptr::null_mut();
    call(|err| unsafe {
        sys::dk_launcher_info(name.as_ref().map_or(std::ptr::null(), |n| n.as_ptr()), &mut out, err)
    })?;
    // One allocation holds the struct and its strings: copy, then free once.
    let info = unsafe {
        let c = &*out;
        LauncherInfo {
            launcher: text(c.launcher),
            rank: c.rank,
            world_size: c.world_size,
            local_rank: c.local_rank,
            local_world_size: c.local_world_size,
            node_rank: c.node_rank,
            master_addr: text(c.master_addr),
            master_port: c.master_port,
            store_address: text(c.store_address),
            hosts_store: c.hosts_store != 0,
        }
    };
    unsafe { sys::dk_free(out as *mut c_void) };
    Ok(info)
}

unsafe fn text(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        CStr::from_ptr(p).to_string_lossy().into_owned()
    }
}
