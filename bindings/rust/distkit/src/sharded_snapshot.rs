//! Sharded state kept in peers' memory (`dk_sharded_snapshot_*`, ABI 0.10),
//! where each rank's shard exists once (FSDP: `Shard::local`'s values and the
//! optimizer's per-element state of each flat buffer). Register this rank's
//! buffers once and `commit` on the group the shards are laid out on: each
//! rank's copy also goes to its left-hand neighbour, so rank r holds shards
//! r and r + 1 mod N (2/N of the state) and any one lost shard survives.
//! After `Group::shrink` or `Group::grow` every member of the new group (a
//! replacement with a new, empty snapshot) calls `fetch`, naming the shards
//! it needs (its own when the group kept its size, every shard to lay the
//! state out over fewer ranks), reads them with `shard` or `shard_as`, loads them
//! (for parameters `Shard::load_sharded`) and commits a new snapshot of the new
//! layout.
//!
//! As `Snapshot`, the library copies from memory this type owns, so no Rust
//! borrow outlives a call: `commit` takes the buffers in registration order.
use distkit_sys as sys;

use crate::error::{call, Code, Error, Result};
use crate::group::Group;
use crate::snapshot::{PlainNumber, SnapshotBuffer, Staging};

/// What `fetch` agreed on: the commit loaded and the size of the group that
/// committed it (shards are numbered `0..world`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fetched {
    pub commit: i64,
    pub world: i32,
}

/// A sharded in-memory snapshot (see the module's documentation). One
/// thread at a time (`&mut self`).
pub struct ShardedSnapshot {
    ptr: *mut sys::dk_sharded_snapshot_t,
    staging: Staging,
}

// The handle is used from one thread at a time (&mut self) and may move
// between threads.
unsafe impl Send for ShardedSnapshot {}

impl Drop for ShardedSnapshot {
    fn drop(&mut self) {
        unsafe { sys::dk_sharded_snapshot_destroy(self.ptr) }
    }
}

impl ShardedSnapshot {
    /// An empty snapshot: no buffers, nothing committed.
    pub fn new() -> Result<ShardedSnapshot> {
        crate::check_version()?;
        let mut ptr = std::ptr::null_mut();
        call(|err| unsafe { sys::dk_sharded_snapshot_create(&mut ptr, err) })?;
        Ok(ShardedSnapshot { ptr, staging: Staging::default() })
    }

    /// Adds this rank's part of a sharded state under `name` (its size is
    /// `buffer`'s; its contents are read at `commit`). Every rank registers
    /// the same names in the same order (sizes may differ), all before the
    /// first `commit` or `fetch` (`Code::FailedPrecondition` afterwards: a
    /// new layout takes a new snapshot).
    pub fn register(&mut self, name: &str, buffer: &dyn SnapshotBuffer) -> Result<()> {
        let ptr = self.ptr;
        self.staging.register(name, buffer, |cname, data, bytes, err| unsafe {
            sys::dk_sharded_snapshot_register(ptr, cname, data, bytes, err)
        })
    }

    /// Collective over `group`, whose rank r holds shard r: copies `buffers`
    /// (those registered, in order) and exchanges the copies with the
    /// neighbours. The commit is numbered one past the newest any member
    /// holds and comes into force once every member holds its part (a
    /// failure before that keeps both it and the one before to fetch from).
    /// `Code::InvalidArgument` on every member when the names differ.
    pub fn commit(&mut self, group: &Group, buffers: &[&dyn SnapshotBuffer]) -> Result<()> {
        self.staging.check("sharded snapshot commit", buffers.iter().map(|b| b.bytes().len()))?;
        self.staging.save(buffers.iter().map(|b| b.bytes()));
        call(|err| unsafe { sys::dk_sharded_snapshot_commit(self.ptr, group.raw(), err) })
    }

    /// Collective over `group`, made after a change of membership: the
    /// members agree on the newest commit whose every shard some member
    /// holds, and each receives the shards it names in `wanted` (ranks of the
    /// group that committed; `None`: every shard). On every member alike:
    /// `Code::FailedPrecondition` when no member holds a commit,
    /// `Code::DataLoss` naming the shards when neighbours were lost together,
    /// `Code::InvalidArgument` for an index outside the commit's group.
    pub fn fetch(&mut self, group: &Group, wanted: Option<&[i32]>) -> Result<Fetched> {
        let (ptr, len) = match wanted {
            // An empty list is not "every shard": its pointer is non-null
            // (dangling, never read).
            Some(w) => (w.as_ptr(), w.len()),
            None => (std::ptr::null(), 0),
        };
        let mut commit = 0i64;
        let mut world = 0i32;
        call(|err| unsafe {
            sys::dk_sharded_snapshot_fetch(self.ptr, group.raw(), ptr, len, &mut commit, &mut world, err)
        })?;
        Ok(Fetched { commit, world })
    }

    /// After `fetch`: buffer `buffer` (in registration order) of shard
    /// `index`, as its rank committed it (`Code::NotFound` for a shard not
    /// fetched, `Code::OutOfRange` for a buffer past the shard's).
    pub fn shard(&self, index: i32, buffer: i32) -> Result<&[u8]> {
        let mut data: *const std::os::raw::c_void = std::ptr::null();
        let mut bytes = 0usize;
        call(|err| unsafe { sys::dk_sharded_snapshot_shard(self.ptr, index, buffer, &mut data, &mut bytes, err) })?;
        if bytes == 0 {
            return Ok(&[]);
        }
        // SAFETY: the library keeps the bytes until the next commit, fetch or
        // drop, each of which needs `&mut self` while this borrow lives.
        Ok(unsafe { std::slice::from_raw_parts(data as *const u8, bytes) })
    }

    /// `shard` as elements of `T` (`Code::InvalidArgument` when its size is
    /// not a whole number of them). The library starts every buffer on a
    /// 64-byte boundary, so any element type may view it.
    pub fn shard_as<T: PlainNumber>(&self, index: i32, buffer: i32) -> Result<&[T]> {
        let bytes = self.shard(index, buffer)?;
        let size = std::mem::size_of::<T>();
        if bytes.len() % size != 0 || (bytes.as_ptr() as usize) % std::mem::align_of::<T>() != 0 {
            return Err(Error::new(
                Code::InvalidArgument,
                format!("sharded snapshot: buffer {buffer} of shard {index} ({} bytes) is not a {}-byte element array", bytes.len(), size),
            ));
        }
        // SAFETY: aligned, a whole number of T, and every bit pattern is a T
        // (PlainNumber); borrowed as `bytes` is.
        Ok(unsafe { std::slice::from_raw_parts(bytes.as_ptr() as *const T, bytes.len() / size) })
    }

    /// The number of the commit in force; 0 when none is.
    pub fn commit_number(&self) -> i64 {
        unsafe { sys::dk_sharded_snapshot_commit_number(self.ptr) }
    }

    /// The bytes of memory the library's snapshot holds: this rank's shard
    /// and its neighbour's, a pending commit's, and what `fetch` received
    /// (this binding's staging copy of this rank's buffers adds their size).
    pub fn bytes(&self) -> i64 {
        unsafe { sys::dk_sharded_snapshot_bytes(self.ptr) }
    }
}
