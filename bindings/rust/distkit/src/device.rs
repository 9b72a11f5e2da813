//! Devices as the library names them (DLPack's): this rank's device and
//! where a group's collectives compute (`Group::comm_device`).
use distkit_sys as sys;

use crate::element::{Element, View};
use crate::error::{call, Result};
use crate::{Group, ReduceOp};

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
    pub(crate) fn raw(self) -> sys::DLDevice {
        match self {
            Device::Cpu => sys::DLDevice { device_type: sys::kDLCPU, device_id: 0 },
            Device::Cuda(i) => sys::DLDevice { device_type: sys::kDLCUDA, device_id: i },
            Device::Other(t, i) => sys::DLDevice { device_type: t, device_id: i },
        }
    }
}

/// `len` elements of `T` in a device's memory (a CUDA device's, from the
/// caller's own allocator), which collectives read and write in place; the
/// host never touches it. Made from a raw pointer, as GPU crates hand them
/// out.
pub struct DeviceSlice<T: Element> {
    ptr: *mut T,
    len: usize,
    device: Device,
}

impl<T: Element> DeviceSlice<T> {
    /// # Safety
    /// `ptr` must point at `len` elements of `T` on `device`, valid for as
    /// long as the slice is used, and used by nothing else meanwhile.
    pub unsafe fn from_raw(ptr: *mut T, len: usize, device: Device) -> Self {
        DeviceSlice { ptr, len, device }
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn device(&self) -> Device {
        self.device
    }
    pub fn as_ptr(&self) -> *mut T {
        self.ptr
    }
    pub(crate) fn view(&self) -> Box<View> {
        View::on(self.ptr, self.len, self.device.raw())
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

    /// `all_reduce` of device memory (an "nccl" or "cpu:gloo,cuda:nccl"
    /// group's CUDA device), in place.
    pub fn all_reduce_device<T: Element>(&self, data: &mut DeviceSlice<T>, op: ReduceOp) -> Result<()> {
        let mut v = data.view();
        call(|err| unsafe {
            sys::dk_group_all_reduce(self.raw(), v.tensor(), op.raw(), std::ptr::null_mut(), err)
        })
    }

    /// `broadcast` of device memory from `root`, in place.
    pub fn broadcast_device<T: Element>(&self, data: &mut DeviceSlice<T>, root: i32) -> Result<()> {
        let mut v = data.view();
        call(|err| unsafe { sys::dk_group_broadcast(self.raw(), v.tensor(), root, std::ptr::null_mut(), err) })
    }

    /// `all_gather` of device memory: `output` holds size * input.len()
    /// elements, in rank order.
    pub fn all_gather_device<T: Element>(&self, input: &DeviceSlice<T>, output: &mut DeviceSlice<T>) -> Result<()> {
        let (mut i, mut o) = (input.view(), output.view());
        call(|err| unsafe {
            sys::dk_group_all_gather(self.raw(), i.tensor(), o.tensor(), std::ptr::null_mut(), err)
        })
    }
}
