//! A trainer's state kept in memory for recovery without a checkpoint file
//! (`dk_snapshot_*`, ABI 0.8): register the buffers once, `commit` at points
//! where every rank is at the same step, and after `Group::shrink` or
//! `Group::grow` every member of the new group (a replacement too, on the
//! world `init` returned) calls `sync`, which loads the newest commit any
//! member holds into every rank's buffers.
//!
//! The library keeps its own copy of each buffer (memory this type owns),
//! so no Rust borrow outlives a call: the buffers are passed to `commit`,
//! `sync` and `restore` in the order they were registered.
use std::ffi::{c_char, c_void};

use distkit_sys as sys;

use crate::error::{call, Code, Error, Result};
use crate::group::Group;
use crate::half::{BF16, F16};
use crate::store::cstring;

/// A buffer a snapshot holds: a plain numeric value, an array or a `Vec` of
/// them.
pub trait SnapshotBuffer {
    /// The buffer's bytes.
    fn bytes(&self) -> &[u8];
    /// The same, to be overwritten.
    fn bytes_mut(&mut self) -> &mut [u8];
}

mod sealed {
    pub trait Sealed {}
}

/// Numbers every bit pattern of which is a value (so received bytes are
/// always valid): not `bool`. Sealed: the crate's `unsafe` writes arbitrary
/// bytes into them and reads all of theirs (no padding), which only the
/// types listed here guarantee.
///
/// ```compile_fail
/// #[derive(Clone, Copy)]
/// struct Flag(bool);
/// impl distkit::PlainNumber for Flag {}
/// ```
pub trait PlainNumber: Copy + 'static + sealed::Sealed {}

macro_rules! plain {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl PlainNumber for $t {}
        impl SnapshotBuffer for $t {
            fn bytes(&self) -> &[u8] {
                // SAFETY: a plain number is size_of::<$t>() initialised bytes.
                unsafe { std::slice::from_raw_parts(self as *const $t as *const u8, std::mem::size_of::<$t>()) }
            }
            fn bytes_mut(&mut self) -> &mut [u8] {
                // SAFETY: as above; every bit pattern is a valid $t.
                unsafe { std::slice::from_raw_parts_mut(self as *mut $t as *mut u8, std::mem::size_of::<$t>()) }
            }
        }
    )*};
}
plain!(f32, f64, i8, u8, i16, u16, i32, u32, i64, u64, F16, BF16);

fn slice_bytes<T: PlainNumber>(s: &[T]) -> &[u8] {
    // SAFETY: a slice of plain numbers is size_of_val(s) initialised bytes.
    unsafe { std::slice::from_raw_parts(s.as_ptr() as *const u8, std::mem::size_of_val(s)) }
}

fn slice_bytes_mut<T: PlainNumber>(s: &mut [T]) -> &mut [u8] {
    // SAFETY: as above; every bit pattern is a valid T.
    unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr() as *mut u8, std::mem::size_of_val(s)) }
}

impl<T: PlainNumber> SnapshotBuffer for Vec<T> {
    fn bytes(&self) -> &[u8] {
        slice_bytes(self)
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        slice_bytes_mut(self)
    }
}

impl<T: PlainNumber, const N: usize> SnapshotBuffer for [T; N] {
    fn bytes(&self) -> &[u8] {
        slice_bytes(self)
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        slice_bytes_mut(self)
    }
}

/// An in-memory snapshot of named buffers (see the module's documentation).
/// One thread at a time (`&mut self`).
pub struct Snapshot {
    ptr: *mut sys::dk_snapshot_t,
    staging: Staging,
}

/// A snapshot's (`Snapshot`'s or `ShardedSnapshot`'s) view of each buffer,
/// by name: memory owned here, registered once, never moved (boxed slices).
#[derive(Default)]
pub(crate) struct Staging(Vec<(String, Box<[u8]>)>);

impl Staging {
    /// Registers a copy of `buffer` under `name` through `register` (the
    /// snapshot's register call: name, data, bytes, error).
    pub(crate) fn register(
        &mut self,
        name: &str,
        buffer: &dyn SnapshotBuffer,
        register: impl FnOnce(*const c_char, *mut c_void, usize, sys::ErrOut) -> sys::dk_status_t,
    ) -> Result<()> {
        let cname = cstring(name, "name")?;
        let mut copy = buffer.bytes().to_vec().into_boxed_slice();
        let data = if copy.is_empty() { std::ptr::null_mut() } else { copy.as_mut_ptr() as *mut _ };
        call(|err| register(cname.as_ptr(), data, copy.len(), err))?;
        self.0.push((name.to_string(), copy));
        Ok(())
    }

    /// `Code::InvalidArgument` unless `sizes` are the registered buffers'
    /// (`what` names the call in the message).
    pub(crate) fn check(&self, what: &str, sizes: impl ExactSizeIterator<Item = usize>) -> Result<()> {
        if sizes.len() != self.0.len() {
            return Err(Error::new(
                Code::InvalidArgument,
                format!("{what}: {} buffers given, {} registered", sizes.len(), self.0.len()),
            ));
        }
        for ((name, staged), size) in self.0.iter().zip(sizes) {
            if staged.len() != size {
                return Err(Error::new(
                    Code::InvalidArgument,
                    format!("{what}: buffer '{name}' is {size} bytes, registered as {}", staged.len()),
                ));
            }
        }
        Ok(())
    }

    /// Copies the buffers (checked) into the library's view.
    pub(crate) fn save<'a>(&mut self, buffers: impl Iterator<Item = &'a [u8]>) {
        for ((_, staged), b) in self.0.iter_mut().zip(buffers) {
            staged.copy_from_slice(b);
        }
    }

    fn load_into(&self, buffers: &mut [&mut dyn SnapshotBuffer]) {
        for ((_, staged), b) in self.0.iter().zip(buffers.iter_mut()) {
            b.bytes_mut().copy_from_slice(staged);
        }
    }
}

// The handle is used from one thread at a time (&mut self) and may move
// between threads.
unsafe impl Send for Snapshot {}

impl Drop for Snapshot {
    fn drop(&mut self) {
        unsafe { sys::dk_snapshot_destroy(self.ptr) }
    }
}

impl Snapshot {
    /// An empty snapshot: no buffers, nothing committed.
    pub fn new() -> Result<Snapshot> {
        crate::check_version()?;
        let mut ptr = std::ptr::null_mut();
        call(|err| unsafe { sys::dk_snapshot_create(&mut ptr, err) })?;
        Ok(Snapshot { ptr, staging: Staging::default() })
    }

    /// Adds a buffer of `buffer`'s size under `name` (its contents are read
    /// at `commit`). Every rank registers the same names and sizes in the
    /// same order; all before the first `commit` or `sync`
    /// (`Code::FailedPrecondition` afterwards).
    pub fn register(&mut self, name: &str, buffer: &dyn SnapshotBuffer) -> Result<()> {
        let ptr = self.ptr;
        self.staging.register(name, buffer, |cname, data, bytes, err| unsafe {
            sys::dk_snapshot_register(ptr, cname, data, bytes, err)
        })
    }

    /// Checks `buffers` against those registered; the library's view takes
    /// their present values, so that after a sync or restore they hold
    /// exactly what the library loaded.
    fn stage(&mut self, what: &str, buffers: &[&mut dyn SnapshotBuffer]) -> Result<()> {
        self.staging.check(&format!("snapshot {what}"), buffers.iter().map(|b| b.bytes().len()))?;
        self.staging.save(buffers.iter().map(|b| b.bytes()));
        Ok(())
    }

    /// Copies `buffers` (those registered, in order) into a new snapshot,
    /// which replaces the one held once complete; its number is the held
    /// one's + 1.
    pub fn commit(&mut self, buffers: &[&dyn SnapshotBuffer]) -> Result<()> {
        self.staging.check("snapshot commit", buffers.iter().map(|b| b.bytes().len()))?;
        self.staging.save(buffers.iter().map(|b| b.bytes()));
        call(|err| unsafe { sys::dk_snapshot_commit(self.ptr, err) })
    }

    /// Collective over `group`, after it changed: loads the newest commit any
    /// member holds into every member's `buffers` and returns its number.
    /// `Code::InvalidArgument` on every member when registrations differ
    /// (naming the buffer and the ranks), `Code::FailedPrecondition` when no
    /// member holds a snapshot. On an error the buffers are left as they
    /// were.
    pub fn sync(&mut self, group: &Group, buffers: &mut [&mut dyn SnapshotBuffer]) -> Result<i64> {
        self.stage("sync", buffers)?;
        let mut commit = 0i64;
        call(|err| unsafe { sys::dk_snapshot_sync(self.ptr, group.raw(), &mut commit, err) })?;
        self.staging.load_into(buffers);
        Ok(commit)
    }

    /// Copies the snapshot held back into `buffers`
    /// (`Code::FailedPrecondition` when none is held).
    pub fn restore(&mut self, buffers: &mut [&mut dyn SnapshotBuffer]) -> Result<()> {
        self.stage("restore", buffers)?;
        call(|err| unsafe { sys::dk_snapshot_restore(self.ptr, err) })?;
        self.staging.load_into(buffers);
        Ok(())
    }

    /// The number of the snapshot held (1 for the first commit; after a
    /// sync, the commit loaded); 0 when none is.
    pub fn commit_number(&self) -> i64 {
        unsafe { sys::dk_snapshot_commit_number(self.ptr) }
    }

    /// The bytes of memory the library's snapshot takes (0 when none is
    /// held; this binding's staging copy adds as much again).
    pub fn bytes(&self) -> i64 {
        unsafe { sys::dk_snapshot_bytes(self.ptr) }
    }
}
