//! Element types a collective can move, and the DLPack view of a slice.
use std::os::raw::c_void;

use distkit_sys as sys;

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

/// IEEE half precision, kept as its bit pattern (reductions happen in C++).
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct F16(pub u16);

/// bfloat16, kept as its bit pattern.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BF16(pub u16);

impl F16 {
    /// Exact for values representable in half precision (round toward zero
    /// otherwise); enough to build test data and read results.
    pub fn from_f32(x: f32) -> F16 {
        let b = x.to_bits();
        let sign = ((b >> 16) & 0x8000) as u16;
        let exp = ((b >> 23) & 0xff) as i32 - 127 + 15;
        let mant = b & 0x7f_ffff;
        if x == 0.0 {
            return F16(sign);
        }
        if exp >= 31 {
            return F16(sign | 0x7c00);
        }
        if exp <= 0 {
            let m = (mant | 0x80_0000) >> (14 - exp);
            return F16(sign | m as u16);
        }
        F16(sign | ((exp as u16) << 10) | (mant >> 13) as u16)
    }
    pub fn to_f32(self) -> f32 {
        let sign = ((self.0 & 0x8000) as u32) << 16;
        let exp = ((self.0 >> 10) & 0x1f) as u32;
        let mant = (self.0 & 0x3ff) as u32;
        if exp == 0 {
            let v = mant as f32 / 1024.0 * 2f32.powi(-14);
            return if sign != 0 { -v } else { v };
        }
        if exp == 31 {
            return f32::from_bits(sign | 0x7f80_0000 | (mant << 13));
        }
        f32::from_bits(sign | ((exp + 127 - 15) << 23) | (mant << 13))
    }
}

impl BF16 {
    /// Truncates to bfloat16 (exact for values with 8 significant bits).
    pub fn from_f32(x: f32) -> BF16 {
        BF16((x.to_bits() >> 16) as u16)
    }
    pub fn to_f32(self) -> f32 {
        f32::from_bits((self.0 as u32) << 16)
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
        let mut v = Box::new(View {
            tensor: sys::DLTensor {
                data: data as *mut c_void,
                device: sys::DLDevice { device_type: sys::kDLCPU, device_id: 0 },
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
