//! Element types a collective can move, and the DLPack view of a slice.
use std::os::raw::c_void;

use distkit_sys as sys;

use crate::half::{BF16, F16};

/// The data types of the ABI.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataType {
    Float16,
    BFloat16,
    Float32,
    Float64,
    Int8,
    UInt8,
    Int32,
    Int64,
    Bool,
}

impl DataType {
    pub fn raw(self) -> sys::dk_dtype_t {
        match self {
            DataType::Float16 => sys::DK_FLOAT16,
            DataType::BFloat16 => sys::DK_BFLOAT16,
            DataType::Float32 => sys::DK_FLOAT32,
            DataType::Float64 => sys::DK_FLOAT64,
            DataType::Int8 => sys::DK_INT8,
            DataType::UInt8 => sys::DK_UINT8,
            DataType::Int32 => sys::DK_INT32,
            DataType::Int64 => sys::DK_INT64,
            DataType::Bool => sys::DK_BOOL,
        }
    }

    fn dlpack(self) -> sys::DLDataType {
        let (code, bits) = match self {
            DataType::Float16 => (sys::kDLFloat, 16),
            DataType::BFloat16 => (sys::kDLBfloat, 16),
            DataType::Float32 => (sys::kDLFloat, 32),
            DataType::Float64 => (sys::kDLFloat, 64),
            DataType::Int8 => (sys::kDLInt, 8),
            DataType::UInt8 => (sys::kDLUInt, 8),
            DataType::Int32 => (sys::kDLInt, 32),
            DataType::Int64 => (sys::kDLInt, 64),
            // distkit's convention: DLPack 0.6 has no bool code.
            DataType::Bool => (sys::kDLUInt, 1),
        };
        sys::DLDataType { code, bits, lanes: 1 }
    }
}

mod sealed {
    pub trait Sealed {}
}

/// An element type the library reduces and moves. Sealed: its layout must be
/// exactly the ABI's data type.
pub trait Element: Copy + Send + Sync + 'static + sealed::Sealed {
    const DTYPE: DataType;
}

macro_rules! element {
    ($($t:ty => $d:ident),* $(,)?) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t { const DTYPE: DataType = DataType::$d; }
    )*};
}
element!(f32 => Float32, f64 => Float64, i8 => Int8, u8 => UInt8, i32 => Int32,
         i64 => Int64, bool => Bool, F16 => Float16, BF16 => BFloat16);

/// A one-dimensional DLPack view of a slice. The DLTensor points at `shape`,
/// so the view is boxed and must outlive every call given `tensor()`.
pub(crate) struct View {
    tensor: sys::DLTensor,
    shape: i64,
}

impl View {
    pub(crate) fn new<T: Element>(data: *const T, len: usize) -> Box<View> {
        View::on(data, len, sys::DLDevice { device_type: sys::kDLCPU, device_id: 0 })
    }
    /// The same on any device (device memory the host does not touch).
    pub(crate) fn on<T: Element>(data: *const T, len: usize, device: sys::DLDevice) -> Box<View> {
        let mut v = Box::new(View {
            tensor: sys::DLTensor {
                data: data as *mut c_void,
                device,
                ndim: 1,
                dtype: T::DTYPE.dlpack(),
                shape: std::ptr::null_mut(),
                strides: std::ptr::null_mut(),
                byte_offset: 0,
            },
            shape: len as i64,
        });
        v.tensor.shape = &mut v.shape;
        v
    }
    pub(crate) fn of<T: Element>(s: &[T]) -> Box<View> {
        View::new(s.as_ptr(), s.len())
    }
    pub(crate) fn of_mut<T: Element>(s: &mut [T]) -> Box<View> {
        View::new(s.as_mut_ptr(), s.len())
    }
    pub(crate) fn tensor(&mut self) -> *mut sys::DLTensor {
        &mut self.tensor
    }
}
