//! Errors from the C ABI: the status code read with `dk_error_code` and the
//! message copied out, the error object freed in the same call.
use std::ffi::CStr;
use std::fmt;

use distkit_sys as sys;

/// The status codes of the ABI (google.rpc numbering).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Code {
    Cancelled,
    Unknown,
    InvalidArgument,
    DeadlineExceeded,
    NotFound,
    AlreadyExists,
    PermissionDenied,
    ResourceExhausted,
    FailedPrecondition,
    Aborted,
    OutOfRange,
    Unimplemented,
    Internal,
    Unavailable,
    DataLoss,
    Unauthenticated,
    /// A value this binding does not know (a newer library).
    Other(i32),
}

impl Code {
    pub fn from_raw(status: sys::dk_status_t) -> Code {
        match status {
            sys::DK_CANCELLED => Code::Cancelled,
            sys::DK_UNKNOWN => Code::Unknown,
            sys::DK_INVALID_ARGUMENT => Code::InvalidArgument,
            sys::DK_DEADLINE_EXCEEDED => Code::DeadlineExceeded,
            sys::DK_NOT_FOUND => Code::NotFound,
            sys::DK_ALREADY_EXISTS => Code::AlreadyExists,
            sys::DK_PERMISSION_DENIED => Code::PermissionDenied,
            sys::DK_RESOURCE_EXHAUSTED => Code::ResourceExhausted,
            sys::DK_FAILED_PRECONDITION => Code::FailedPrecondition,
            sys::DK_ABORTED => Code::Aborted,
            sys::DK_OUT_OF_RANGE => Code::OutOfRange,
            sys::DK_UNIMPLEMENTED => Code::Unimplemented,
            sys::DK_INTERNAL => Code::Internal,
            sys::DK_UNAVAILABLE => Code::Unavailable,
            sys::DK_DATA_LOSS => Code::DataLoss,
            sys::DK_UNAUTHENTICATED => Code::Unauthenticated,
            other => Code::Other(other),
        }
    }
}

/// A failed call: what went wrong (`code`) and the library's message, which
/// names the operation, group and rank involved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    code: Code,
    message: String,
}

impl Error {
    pub fn code(&self) -> Code {
        self.code
    }
    pub fn message(&self) -> &str {
        &self.message
    }
    /// An error raised by this binding before calling the library.
    pub(crate) fn new(code: Code, message: impl Into<String>) -> Error {
        Error { code, message: message.into() }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.code, self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

/// Calls `f` with an error out-parameter and turns its status into a Result.
pub(crate) fn call(f: impl FnOnce(sys::ErrOut) -> sys::dk_status_t) -> Result<()> {
    let mut err: *mut sys::dk_error_t = std::ptr::null_mut();
    let status = f(&mut err);
    if status == sys::DK_OK {
        return Ok(());
    }
    if err.is_null() {
        return Err(Error::new(Code::from_raw(status), format!("distkit call failed with status {status}")));
    }
    // SAFETY: a non-null err is a live error object that we own.
    unsafe {
        let code = Code::from_raw(sys::dk_error_code(err));
        let message = CStr::from_ptr(sys::dk_error_message(err)).to_string_lossy().into_owned();
        sys::dk_error_free(err);
        Err(Error { code, message })
    }
}
