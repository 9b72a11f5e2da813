//! The job's key-value store (a gRPC server one process hosts).
use std::ffi::{CStr, CString};
use std::os::raw::c_void;
use std::sync::Arc;
use std::time::Duration;

use distkit_sys as sys;

use crate::abi_memory::{take_bytes, take_list};
use crate::error::{call, Code, Error, Result};
use crate::millis;

struct Handle(*mut sys::dk_store_t);

// SAFETY: the header marks every store call "any thread".
unsafe impl Send for Handle {}
unsafe impl Sync for Handle {}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: we own the handle; destroy never fails.
        unsafe { sys::dk_store_destroy(self.0) }
    }
}

/// A connection to a job's store. Cloning shares the connection; it closes
/// (and a server started by `serve` stops) when the last clone drops.
#[derive(Clone)]
pub struct Store {
    handle: Arc<Handle>,
}

/// Options of `Store::connect` and `Store::serve`.
#[derive(Clone, Debug)]
pub struct StoreOptions {
    pub token: Option<String>,
    pub timeout: Duration,
    pub connect_timeout: Duration,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            token: None,
            timeout: Duration::from_secs(300),
            connect_timeout: Duration::from_secs(300),
        }
    }
}

pub(crate) fn cstring(s: &str, what: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::new(Code::InvalidArgument, format!("{what} contains a NUL byte")))
}

impl Store {
    fn open(
        address: &str,
        options: &StoreOptions,
        f: unsafe extern "C" fn(*const sys::dk_store_config_t, *mut *mut sys::dk_store_t, sys::ErrOut) -> sys::dk_status_t,
    ) -> Result<Store> {
        crate::check_version()?;
        let address = cstring(address, "address")?;
        let token = options.token.as_deref().map(|t| cstring(t, "token")).transpose()?;
        // SAFETY: config_init fills every field; the strings outlive the call
        // (the library copies them).
        unsafe {
            let mut config = std::mem::zeroed::<sys::dk_store_config_t>();
            let size = std::mem::size_of::<sys::dk_store_config_t>();
            sys::dk_store_config_init_sized(&mut config, size);
            config.address = address.as_ptr();
            config.token = token.as_ref().map_or(std::ptr::null(), |t| t.as_ptr());
            config.timeout_ms = millis(options.timeout);
            config.connect_timeout_ms = millis(options.connect_timeout);
            let mut out = std::ptr::null_mut();
            call(|err| f(&config, &mut out, err))?;
            Ok(Store { handle: Arc::new(Handle(out)) })
        }
    }

    /// Connects to the store at "host:port".
    pub fn connect(address: &str, options: &StoreOptions) -> Result<Store> {
        Store::open(address, options, sys::dk_store_connect)
    }

    /// Starts a store server in this process ("127.0.0.1:0" picks a port).
    pub fn serve(address: &str, options: &StoreOptions) -> Result<Store> {
        Store::open(address, options, sys::dk_store_serve)
    }

    /// A new connection to the job's store (the one `init` or
    /// `init_with_store` joined through), so other components can rendezvous
    /// in it; FailedPrecondition when not distributed. Dropping it closes
    /// this connection only.
    pub fn default_store() -> Result<Store> {
        crate::check_version()?;
        let mut out = std::ptr::null_mut();
        call(|err| unsafe { sys::dk_default_store(&mut out, err) })?;
        Ok(Store { handle: Arc::new(Handle(out)) })
    }

    pub(crate) fn raw(&self) -> *mut sys::dk_store_t {
        self.handle.0
    }

    /// "host:port" of the store.
    pub fn address(&self) -> String {
        // SAFETY: borrowed until destroy, which our Arc prevents.
        unsafe { CStr::from_ptr(sys::dk_store_address(self.raw())).to_string_lossy().into_owned() }
    }

    pub fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        let key = cstring(key, "key")?;
        call(|err| unsafe { sys::dk_store_set(self.raw(), key.as_ptr(), value.as_ptr() as *const c_void, value.len(), err) })
    }

    /// Blocks until `key` exists (or the store's timeout passes).
    pub fn get(&self, key: &str) -> Result<Vec<u8>> {
        let key = cstring(key, "key")?;
        let (mut data, mut size) = (std::ptr::null_mut(), 0usize);
        call(|err| unsafe { sys::dk_store_get(self.raw(), key.as_ptr(), &mut data, &mut size, err) })?;
        Ok(unsafe { take_bytes(data, size) })
    }

    /// Adds `delta` to the integer at `key`; returns the new value.
    pub fn add(&self, key: &str, delta: i64) -> Result<i64> {
        let key = cstring(key, "key")?;
        let mut out = 0i64;
        call(|err| unsafe { sys::dk_store_add(self.raw(), key.as_ptr(), delta, &mut out, err) })?;
        Ok(out)
    }

    fn key_ptrs(keys: &[&str]) -> Result<(Vec<CString>, Vec<*const std::os::raw::c_char>)> {
        let owned = keys.iter().map(|k| cstring(k, "key")).collect::<Result<Vec<_>>>()?;
        let ptrs = owned.iter().map(|k| k.as_ptr()).collect();
        Ok((owned, ptrs))
    }

    /// Blocks until every key exists; `None` uses the store's timeout.
    pub fn wait(&self, keys: &[&str], timeout: Option<Duration>) -> Result<()> {
        let (_owned, ptrs) = Store::key_ptrs(keys)?;
        let t = timeout.map_or(-1, millis);
        call(|err| unsafe { sys::dk_store_wait(self.raw(), ptrs.as_ptr(), ptrs.len(), t, err) })
    }

    /// Whether every key exists, without blocking.
    pub fn check(&self, keys: &[&str]) -> Result<bool> {
        let (_owned, ptrs) = Store::key_ptrs(keys)?;
        let mut out = 0i32;
        call(|err| unsafe { sys::dk_store_check(self.raw(), ptrs.as_ptr(), ptrs.len(), &mut out, err) })?;
        Ok(out != 0)
    }

    /// Deletes `key`; true if it existed.
    pub fn delete_key(&self, key: &str) -> Result<bool> {
        let key = cstring(key, "key")?;
        let mut out = 0i32;
        call(|err| unsafe { sys::dk_store_delete_key(self.raw(), key.as_ptr(), &mut out, err) })?;
        Ok(out != 0)
    }

    /// torch's compare_set: sets `desired` if `key` holds `expected` (or is
    /// absent and `expected` is empty); returns the value it holds after.
    pub fn compare_set(&self, key: &str, expected: &[u8], desired: &[u8]) -> Result<Vec<u8>> {
        let key = cstring(key, "key")?;
        let (mut data, mut size) = (std::ptr::null_mut(), 0usize);
        call(|err| unsafe {
            sys::dk_store_compare_set(
                self.raw(),
                key.as_ptr(),
                expected.as_ptr() as *const c_void,
                expected.len(),
                desired.as_ptr() as *const c_void,
                desired.len(),
                &mut data,
                &mut size,
                err,
            )
        })?;
        Ok(unsafe { take_bytes(data, size) })
    }

    pub fn append(&self, key: &str, value: &[u8]) -> Result<()> {
        let key = cstring(key, "key")?;
        call(|err| unsafe { sys::dk_store_append(self.raw(), key.as_ptr(), value.as_ptr() as *const c_void, value.len(), err) })
    }

    pub fn multi_set(&self, items: &[(&str, &[u8])]) -> Result<()> {
        let keys: Vec<&str> = items.iter().map(|(k, _)| *k).collect();
        let (_owned, ptrs) = Store::key_ptrs(&keys)?;
        let values: Vec<sys::dk_bytes_t> =
            items.iter().map(|(_, v)| sys::dk_bytes_t { data: v.as_ptr() as *const c_void, size: v.len() }).collect();
        call(|err| unsafe { sys::dk_store_multi_set(self.raw(), ptrs.as_ptr(), values.as_ptr(), ptrs.len(), err) })
    }

    /// Blocks until every key exists; the values in key order.
    pub fn multi_get(&self, keys: &[&str]) -> Result<Vec<Vec<u8>>> {
        let (_owned, ptrs) = Store::key_ptrs(keys)?;
        let mut list = std::ptr::null_mut();
        call(|err| unsafe { sys::dk_store_multi_get(self.raw(), ptrs.as_ptr(), ptrs.len(), &mut list, err) })?;
        Ok(unsafe { take_list(list, keys.len()) })
    }

    pub fn num_keys(&self) -> Result<i64> {
        let mut out = 0i64;
        call(|err| unsafe { sys::dk_store_num_keys(self.raw(), &mut out, err) })?;
        Ok(out)
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("address", &self.address()).finish()
    }
}
