//! Devices as the library names them (DLPack's): this rank's device and
//! where a group's collectives compute (`Group::comm_device`).
use distkit_sys as sys;

use crate::error::{call, Result};
use crate::Group;

/// A DLPack device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Device {
    Cpu,
    /// A CUDA GPU, by index.
    Cuda(i32),
    /// Another DLPack device type (`device_type`, `device_id`).
    Other(i32, i32),
}

impl Device {
    pub(crate) fn from_raw(d: sys::DLDevice) -> Device {
        match d.device_type {
            sys::kDLCPU => Device::Cpu,
            sys::kDLCUDA => Device::Cuda(d.device_id),
            other => Device::Other(other, d.device_id),
        }
    }
}

/// This rank's device (mmengine's get_device): `Cuda(local rank)` when the
/// library was built with CUDA and a GPU is usable, else `Cpu`.
pub fn device() -> Device {
    let mut out = sys::DLDevice { device_type: sys::kDLCPU, device_id: 0 };
    unsafe { sys::dk_get_device(&mut out) };
    Device::from_raw(out)
}

impl Group {
    /// Where this group's collectives compute, as its backend says: `Cpu`
    /// for gloo and mpi, `Cuda(device)` for nccl and "cpu:gloo,cuda:nccl".
    pub fn comm_device(&self) -> Result<Device> {
        let mut out = sys::DLDevice { device_type: sys::kDLCPU, device_id: 0 };
        call(|err| unsafe { sys::dk_group_comm_device(self.raw(), &mut out, err) })?;
        Ok(Device::from_raw(out))
    }

    /// The CUDA stream (a `cudaStream_t`; null: the legacy default stream)
    /// the caller's work on this group's device runs on: every CUDA
    /// operation issued afterwards follows the work issued on it before.
    /// Ignored by groups without a CUDA device.
    ///
    /// # Safety
    /// `stream` must be a live CUDA stream (or null) until it is replaced.
    pub unsafe fn set_cuda_stream(&self, stream: *mut std::ffi::c_void) -> Result<()> {
        call(|err| unsafe { sys::dk_group_set_cuda_stream(self.raw(), stream, err) })
    }
}
