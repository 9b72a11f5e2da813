//! Memory the library allocates and hands to the caller (ABI convention 7):
//! copied into Rust values and released with `dk_free` in the same call, so
//! no library-owned pointer outlives the call that returned it.
use std::os::raw::c_void;

use distkit_sys as sys;

/// Copies an owned byte buffer from the library and frees it.
///
/// # Safety
/// `data` is null or a buffer of `size` bytes that the library returned as
/// owned and that nothing else frees.
pub(crate) unsafe fn take_bytes(data: *mut c_void, size: usize) -> Vec<u8> {
    let bytes = if data.is_null() { Vec::new() } else { std::slice::from_raw_parts(data as *const u8, size).to_vec() };
    sys::dk_free(data);
    bytes
}

/// Copies a list of byte strings owned by the library and frees it (one
/// allocation holds the array and the bytes, so one `dk_free` releases both).
///
/// # Safety
/// `list` is null or an owned list of `count` entries returned by the library.
pub(crate) unsafe fn take_list(list: *mut sys::dk_bytes_t, count: usize) -> Vec<Vec<u8>> {
    if list.is_null() {
        return Vec::new();
    }
    let items = std::slice::from_raw_parts(list, count)
        .iter()
        .map(|b| if b.size == 0 { Vec::new() } else { std::slice::from_raw_parts(b.data as *const u8, b.size).to_vec() })
        .collect();
    sys::dk_free(list as *mut c_void);
    items
}
