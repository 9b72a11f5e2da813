//! Process groups and their collectives.
use std::cell::RefCell;
use std::ffi::CStr;
use std::marker::PhantomData;
use std::os::raw::c_void;
use std::time::Duration;

use distkit_sys as sys;

use crate::abi_memory::take_list;
use crate::element::{Element, View};
use crate::error::{call, Code, Error, Result};
use crate::store::Store;

/// Reductions (mmengine's names). `Mean` on integers truncates toward zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceOp {
    Sum,
    Product,
    Min,
    Max,
    BitAnd,
    BitOr,
    BitXor,
    Mean,
}

impl ReduceOp {
    pub fn raw(self) -> sys::dk_reduce_op_t {
        match self {
            ReduceOp::Sum => sys::DK_OP_SUM,
            ReduceOp::Product => sys::DK_OP_PRODUCT,
            ReduceOp::Min => sys::DK_OP_MIN,
            ReduceOp::Max => sys::DK_OP_MAX,
            ReduceOp::BitAnd => sys::DK_OP_BAND,
            ReduceOp::BitOr => sys::DK_OP_BOR,
            ReduceOp::BitXor => sys::DK_OP_BXOR,
            ReduceOp::Mean => sys::DK_OP_MEAN,
        }
    }
}

fn bytes_of(items: &[Vec<u8>]) -> Vec<sys::dk_bytes_t> {
    items.iter().map(|v| sys::dk_bytes_t { data: v.as_ptr() as *const c_void, size: v.len() }).collect()
}

/// Options of `Group::new_group_with_options` (ABI 0.11): what a subgroup
/// sets apart from its parent. The default makes the group `new_group`
/// makes.
///
/// ```no_run
/// # fn f(world: &distkit::Group) -> distkit::Result<()> {
/// use std::time::Duration;
/// let options = distkit::GroupOptions { timeout: Some(Duration::from_secs(10)), ..Default::default() };
/// let pair = world.new_group_with_options(&[0, 1], &options)?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupOptions {
    /// None: made collectively over the parent, as `new_group`. Some: made
    /// by its members only, as `new_named_group` with this name (no '/',
    /// unique among the parent's named subgroups).
    pub name: Option<String>,
    /// Per collective of the new group; None (or zero): the parent's.
    pub timeout: Option<Duration>,
    /// How long creating the group waits for its members to connect; None
    /// (or zero): the new group's `timeout`.
    pub connect_timeout: Option<Duration>,
}

impl GroupOptions {
    /// Options naming the group (`new_named_group`'s way of making it).
    pub fn named(name: &str) -> GroupOptions {
        GroupOptions { name: Some(name.to_string()), ..Default::default() }
    }
    /// The new group's timeout per collective.
    pub fn timeout(self, timeout: Duration) -> GroupOptions {
        GroupOptions { timeout: Some(timeout), ..self }
    }
    /// How long creating the group waits for its members to connect.
    pub fn connect_timeout(self, connect_timeout: Duration) -> GroupOptions {
        GroupOptions { connect_timeout: Some(connect_timeout), ..self }
    }
}

/// A timeout in the ABI's milliseconds: 0 (the default) for None or zero,
/// else at least 1 (a shorter one is not "the default").
fn option_millis(d: Option<Duration>) -> i64 {
    d.map_or(0, crate::millis)
}

/// A process group. Collectives are called by every member in the same order.
/// `Send` (it may move to another thread) but not `Sync`: the header does not
/// promise that one group's collectives may be called from several threads
/// at once. Use `abort_handle()` to stop it from elsewhere.
pub struct Group {
    ptr: *mut sys::dk_group_t,
    // Keeps the store a group was created with alive (the ABI borrows it).
    _store: Option<Store>,
}

// SAFETY: a group handle is not tied to the thread that made it.
unsafe impl Send for Group {}

impl Drop for Group {
    fn drop(&mut self) {
        // SAFETY: we own the handle. Work cannot outlive a borrow of the group.
        unsafe { sys::dk_group_destroy(self.ptr) }
    }
}

/// Aborts a group from any thread: its in-flight work completes with
/// `Code::Cancelled` and later calls fail. Valid even after the group drops
/// (the ABI keeps destroyed handles reserved).
#[derive(Clone, Copy)]
pub struct AbortHandle(*mut sys::dk_group_t);

// SAFETY: dk_group_abort is "any thread".
unsafe impl Send for AbortHandle {}
unsafe impl Sync for AbortHandle {}

impl AbortHandle {
    pub fn abort(&self) {
        unsafe { sys::dk_group_abort(self.0) }
    }
}

impl Group {
    pub(crate) fn raw(&self) -> *mut sys::dk_group_t {
        self.ptr
    }

    pub(crate) fn from_raw(ptr: *mut sys::dk_group_t, store: Option<Store>) -> Group {
        Group { ptr, _store: store }
    }

    /// This process's rank in the group (-1 if it is not a member).
    pub fn rank(&self) -> i32 {
        unsafe { sys::dk_group_rank(self.ptr) }
    }
    pub fn size(&self) -> i32 {
        unsafe { sys::dk_group_size(self.ptr) }
    }
    pub fn backend(&self) -> Option<String> {
        unsafe { opt_string(sys::dk_group_backend(self.ptr)) }
    }
    pub fn name(&self) -> Option<String> {
        unsafe { opt_string(sys::dk_group_name(self.ptr)) }
    }
    /// The default group's rank of this group's rank `group_rank` (-1 when
    /// out of range): collectives take ranks of the group they run on.
    pub fn global_rank(&self, group_rank: i32) -> i32 {
        unsafe { sys::dk_group_global_rank(self.ptr, group_rank) }
    }
    pub fn abort_handle(&self) -> AbortHandle {
        AbortHandle(self.ptr)
    }
    /// Ok, or the error that made the group unusable.
    pub fn async_error(&self) -> Result<()> {
        call(|err| unsafe { sys::dk_group_async_error(self.ptr, err) })
    }

    /// Collective over this group: a subgroup of the given ranks (ranks of
    /// this group). Non-members get a group whose calls fail with
    /// `Code::FailedPrecondition`.
    pub fn new_group(&self, ranks: &[i32]) -> Result<Group> {
        let mut out = std::ptr::null_mut();
        call(|err| unsafe { sys::dk_group_new(self.ptr, ranks.as_ptr(), ranks.len(), &mut out, err) })?;
        Ok(Group::from_raw(out, self._store.clone()))
    }

    /// Collective over the members only: every rank in `ranks` (ranks of
    /// this group) calls it with the same ranks and `name` (no '/', unique
    /// among this group's named subgroups); the other ranks need not, and a
    /// rank not in `ranks` gets `InvalidArgument`. Every backend (MPI:
    /// `MPI_Comm_create_group`; NCCL: a new communicator among the members).
    pub fn new_named_group(&self, ranks: &[i32], name: &str) -> Result<Group> {
        let name = crate::store::cstring(name, "name")?;
        let mut out = std::ptr::null_mut();
        call(|err| unsafe {
            sys::dk_group_new_named(self.ptr, ranks.as_ptr(), ranks.len(), name.as_ptr(), &mut out, err)
        })?;
        Ok(Group::from_raw(out, self._store.clone()))
    }

    /// A subgroup with options of its own (ABI 0.11; torch's
    /// `new_group(ranks, timeout=...)`): `options.name` None makes it as
    /// `new_group` (collective over this group), Some as `new_named_group`
    /// (by the members only, same rules for the name); its collectives time
    /// out after `options.timeout` and its creation waits up to
    /// `options.connect_timeout` for the members to connect
    /// (`Code::DeadlineExceeded` naming the group after that).
    pub fn new_group_with_options(&self, ranks: &[i32], options: &GroupOptions) -> Result<Group> {
        let name = options.name.as_deref().map(|n| crate::store::cstring(n, "name")).transpose()?;
        let mut raw = unsafe {
            let mut o = std::mem::zeroed::<sys::dk_group_options_t>();
            let size = std::mem::size_of::<sys::dk_group_options_t>();
            sys::dk_group_options_init_sized(&mut o, size);
            o
        };
        raw.name = name.as_ref().map_or(std::ptr::null(), |n| n.as_ptr());
        raw.timeout_ms = option_millis(options.timeout);
        raw.connect_timeout_ms = option_millis(options.connect_timeout);
        let mut out = std::ptr::null_mut();
        call(|err| unsafe {
            sys::dk_group_new_with_options(self.ptr, ranks.as_ptr(), ranks.len(), &raw, &mut out, err)
        })?;
        Ok(Group::from_raw(out, self._store.clone()))
    }

    /// Recovery without restarting: every survivor of a failure calls it on
    /// the failed group. Waits up to `settle` for every member to report
    /// alive, agrees on the survivors through the store and returns a group
    /// of them (ranks renumbered in the old order). Gloo groups only.
    pub fn shrink(&self, settle: std::time::Duration) -> Result<Group> {
        let mut out = std::ptr::null_mut();
        let settle_ms = crate::millis(settle);
        call(|err| unsafe { sys::dk_group_shrink(self.ptr, settle_ms, &mut out, err) })?;
        Ok(Group::from_raw(out, self._store.clone()))
    }

    /// Growing back to the job's size once a replacement process took a lost
    /// rank's place (`distrun --max-replacements`, ABI 0.7): every survivor
    /// calls it on the group it holds (the one `shrink` returned, or the
    /// failed group itself), which is aborted first. The replacement does not
    /// call it: its `init` sees `DISTKIT_REPLACEMENT` and joins this grow,
    /// and the world it returns is the grown group. All get a group of
    /// `world_size` ranks (None: the size `init` joined with), world ranks in
    /// the original order, named "world@g<generation>", with connections of
    /// its own. Blocks up to `timeout` (None or zero: this group's operation
    /// timeout); when a rank never comes every participant gets
    /// `Code::DeadlineExceeded` naming it. Gloo and NCCL groups.
    pub fn grow(&self, world_size: Option<usize>, timeout: Option<std::time::Duration>) -> Result<Group> {
        let world_size = match world_size {
            None => 0,
            Some(n) => match i32::try_from(n) {
                Ok(n) if n > 0 => n,
                _ => {
                    return Err(Error::new(
                        Code::InvalidArgument,
                        format!("grow: world_size {n} is not a size (1..{}; None: the job's)", i32::MAX),
                    ))
                }
            },
        };
        let timeout_ms = timeout.map_or(-1, crate::millis);
        let mut out = std::ptr::null_mut();
        call(|err| unsafe { sys::dk_group_grow(self.ptr, world_size, timeout_ms, &mut out, err) })?;
        Ok(Group::from_raw(out, self._store.clone()))
    }

    /// Local (ABI 0.8): whether a replacement that came after the survivors
    /// stopped waiting (and shrank) waits to join the next `grow` of this
    /// group's world. Ranks may see it at different moments: agree (e.g. an
    /// all_reduce of max) before all call `grow`.
    pub fn grow_pending(&self) -> Result<bool> {
        let mut pending = 0i32;
        call(|err| unsafe { sys::dk_group_grow_pending(self.ptr, &mut pending, err) })?;
        Ok(pending != 0)
    }

    fn sync(&self, f: impl FnOnce(*mut sys::dk_group_t, sys::ErrOut) -> sys::dk_status_t) -> Result<()> {
        call(|err| f(self.ptr, err))
    }

    pub fn all_reduce<T: Element>(&self, data: &mut [T], op: ReduceOp) -> Result<()> {
        let mut v = View::of_mut(data);
        self.sync(|g, err| unsafe { sys::dk_group_all_reduce(g, v.tensor(), op.raw(), std::ptr::null_mut(), err) })
    }

    pub fn broadcast<T: Element>(&self, data: &mut [T], root: i32) -> Result<()> {
        let mut v = View::of_mut(data);
        self.sync(|g, err| unsafe { sys::dk_group_broadcast(g, v.tensor(), root, std::ptr::null_mut(), err) })
    }

    /// The reduction lands in `data` on `root`; elsewhere `data` is unchanged.
    pub fn reduce<T: Element>(&self, data: &mut [T], op: ReduceOp, root: i32) -> Result<()> {
        let mut v = View::of_mut(data);
        self.sync(|g, err| unsafe { sys::dk_group_reduce(g, v.tensor(), op.raw(), root, std::ptr::null_mut(), err) })
    }

    /// `output` holds size * input.len() elements, in rank order.
    pub fn all_gather<T: Element>(&self, input: &[T], output: &mut [T]) -> Result<()> {
        let (mut i, mut o) = (View::of(input), View::of_mut(output));
        self.sync(|g, err| unsafe { sys::dk_group_all_gather(g, i.tensor(), o.tensor(), std::ptr::null_mut(), err) })
    }

    /// `output` (size * input.len()) is given on `root` only.
    pub fn gather<T: Element>(&self, input: &[T], output: Option<&mut [T]>, root: i32) -> Result<()> {
        let mut i = View::of(input);
        let mut o = output.map(View::of_mut);
        let op = o.as_mut().map_or(std::ptr::null_mut(), |o| o.tensor());
        self.sync(|g, err| unsafe { sys::dk_group_gather(g, i.tensor(), op, root, std::ptr::null_mut(), err) })
    }

    /// `input` (size * output.len()) is given on `root` only.
    pub fn scatter<T: Element>(&self, input: Option<&[T]>, output: &mut [T], root: i32) -> Result<()> {
        let mut i = input.map(View::of);
        let mut o = View::of_mut(output);
        let ip = i.as_mut().map_or(std::ptr::null_mut(), |i| i.tensor());
        self.sync(|g, err| unsafe { sys::dk_group_scatter(g, ip, o.tensor(), root, std::ptr::null_mut(), err) })
    }

    /// `input` holds size * output.len() elements.
    pub fn reduce_scatter<T: Element>(&self, input: &[T], output: &mut [T], op: ReduceOp) -> Result<()> {
        let (mut i, mut o) = (View::of(input), View::of_mut(output));
        self.sync(|g, err| unsafe {
            sys::dk_group_reduce_scatter(g, i.tensor(), o.tensor(), op.raw(), std::ptr::null_mut(), err)
        })
    }

    /// Equal parts: rank r gets part r of every rank's input.
    pub fn all_to_all<T: Element>(&self, input: &[T], output: &mut [T]) -> Result<()> {
        let (mut i, mut o) = (View::of(input), View::of_mut(output));
        self.sync(|g, err| unsafe {
            sys::dk_group_all_to_all(g, i.tensor(), std::ptr::null(), o.tensor(), std::ptr::null(), 0, std::ptr::null_mut(), err)
        })
    }

    /// Uneven parts: `input_splits[r]` elements go to rank r and
    /// `output_splits[r]` come from it.
    pub fn all_to_all_uneven<T: Element>(
        &self,
        input: &[T],
        input_splits: &[i64],
        output: &mut [T],
        output_splits: &[i64],
    ) -> Result<()> {
        if input_splits.len() != output_splits.len() {
            return Err(Error::new(
                Code::InvalidArgument,
                format!(
                    "all_to_all: {} input splits but {} output splits",
                    input_splits.len(),
                    output_splits.len()
                ),
            ));
        }
        let (mut i, mut o) = (View::of(input), View::of_mut(output));
        self.sync(|g, err| unsafe {
            sys::dk_group_all_to_all(
                g,
                i.tensor(),
                input_splits.as_ptr(),
                o.tensor(),
                output_splits.as_ptr(),
                input_splits.len(),
                std::ptr::null_mut(),
                err,
            )
        })
    }

    pub fn barrier(&self) -> Result<()> {
        self.sync(|g, err| unsafe { sys::dk_group_barrier(g, std::ptr::null_mut(), err) })
    }

    /// Point to point: only this rank and `dst` take part.
    pub fn send<T: Element>(&self, data: &[T], dst: i32, tag: i32) -> Result<()> {
        let mut v = View::of(data);
        self.sync(|g, err| unsafe { sys::dk_group_send(g, v.tensor(), dst, tag, std::ptr::null_mut(), err) })
    }

    pub fn recv<T: Element>(&self, data: &mut [T], src: i32, tag: i32) -> Result<()> {
        let mut v = View::of_mut(data);
        self.sync(|g, err| unsafe { sys::dk_group_recv(g, v.tensor(), src, tag, std::ptr::null_mut(), err) })
    }

    /// mmengine's all_reduce_params on several buffers of one type:
    /// `bucket_size_mb` None puts them all in one flattened all_reduce.
    pub fn all_reduce_coalesced<T: Element>(
        &self,
        buffers: &mut [&mut [T]],
        op: ReduceOp,
        bucket_size_mb: Option<i64>,
    ) -> Result<()> {
        let mut views: Vec<Box<View>> = buffers.iter_mut().map(|b| View::of_mut(b)).collect();
        let ptrs: Vec<*mut sys::DLTensor> = views.iter_mut().map(|v| v.tensor()).collect();
        self.sync(|g, err| unsafe {
            sys::dk_group_all_reduce_coalesced(g, ptrs.as_ptr(), ptrs.len(), op.raw(), 1, bucket_size_mb.unwrap_or(-1), err)
        })
    }

    /// Rank 0's random seed, on every rank.
    pub fn sync_random_seed(&self) -> Result<i32> {
        let mut out = 0;
        self.sync(|g, err| unsafe { sys::dk_group_sync_random_seed(g, &mut out, err) })?;
        Ok(out)
    }

    /// Every rank's bytes (any length), in rank order.
    pub fn all_gather_object(&self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        let (mut list, mut count) = (std::ptr::null_mut(), 0usize);
        self.sync(|g, err| unsafe {
            sys::dk_group_all_gather_object(g, data.as_ptr() as *const c_void, data.len(), &mut list, &mut count, err)
        })?;
        Ok(unsafe { take_list(list, count) })
    }

    /// On `dst`, every rank's bytes in rank order; elsewhere `None`.
    pub fn gather_object(&self, data: &[u8], dst: i32) -> Result<Option<Vec<Vec<u8>>>> {
        let (mut list, mut count) = (std::ptr::null_mut(), 0usize);
        self.sync(|g, err| unsafe {
            sys::dk_group_gather_object(g, data.as_ptr() as *const c_void, data.len(), dst, &mut list, &mut count, err)
        })?;
        Ok(if self.rank() == dst { Some(unsafe { take_list(list, count) }) } else { None })
    }

    /// `src`'s list on every rank (`items` is read on `src` only).
    pub fn broadcast_object_list(&self, items: &[Vec<u8>], src: i32) -> Result<Vec<Vec<u8>>> {
        let raw = bytes_of(items);
        let (mut list, mut count) = (std::ptr::null_mut(), 0usize);
        self.sync(|g, err| unsafe {
            sys::dk_group_broadcast_object_list(g, raw.as_ptr(), raw.len(), src, &mut list, &mut count, err)
        })?;
        Ok(unsafe { take_list(list, count) })
    }

    /// Runs `f` with a scope for asynchronous collectives. Buffers lent to a
    /// `Work` stay borrowed until the scope ends, and the scope waits for every
    /// operation it started, even one whose `Work` was leaked, so no buffer is
    /// freed or touched while the library still uses it.
    pub fn scope<'env, F, R>(&'env self, f: F) -> R
    where
        F: for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> R,
    {
        let scope = Scope { group: self, works: RefCell::new(Vec::new()), _scope: PhantomData };
        // As std::thread::scope: wait for every operation even when `f`
        // panics, before unwinding frees the buffers they write into.
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&scope)));
        scope.finish();
        match result {
            Ok(r) => r,
            Err(payload) => std::panic::resume_unwind(payload),
        }
    }
}

unsafe fn opt_string(p: *const std::os::raw::c_char) -> Option<String> {
    if p.is_null() {
        None
    } else {
        Some(CStr::from_ptr(p).to_string_lossy().into_owned())
    }
}

/// Asynchronous collectives over one group (see `Group::scope`).
pub struct Scope<'scope, 'env: 'scope> {
    group: &'env Group,
    // Handles of started operations; null once waited and freed.
    works: RefCell<Vec<*mut sys::dk_work_t>>,
    _scope: PhantomData<&'scope mut &'scope ()>,
}

impl<'scope, 'env> Scope<'scope, 'env> {
    fn finish(&self) {
        for w in self.works.borrow_mut().iter_mut() {
            if !w.is_null() {
                // SAFETY: a live handle; wait without limit, then free.
                unsafe {
                    sys::dk_work_wait(*w, -1, std::ptr::null_mut());
                    sys::dk_work_destroy(*w);
                }
                *w = std::ptr::null_mut();
            }
        }
    }

    fn start(
        &'scope self,
        views: Vec<Box<View>>,
        f: impl FnOnce(*mut sys::dk_group_t, sys::WorkOut, sys::ErrOut) -> sys::dk_status_t,
    ) -> Result<Work<'scope>> {
        let mut work = std::ptr::null_mut();
        call(|err| f(self.group.ptr, &mut work, err))?;
        let mut works = self.works.borrow_mut();
        works.push(work);
        Ok(Work { works: &self.works, index: works.len() - 1, _views: views })
    }

    pub fn all_reduce<T: Element>(&'scope self, data: &'scope mut [T], op: ReduceOp) -> Result<Work<'scope>> {
        let mut v = View::of_mut(data);
        let t = v.tensor();
        self.start(vec![v], |g, w, err| unsafe { sys::dk_group_all_reduce(g, t, op.raw(), w, err) })
    }

    pub fn broadcast<T: Element>(&'scope self, data: &'scope mut [T], root: i32) -> Result<Work<'scope>> {
        let mut v = View::of_mut(data);
        let t = v.tensor();
        self.start(vec![v], |g, w, err| unsafe { sys::dk_group_broadcast(g, t, root, w, err) })
    }

    pub fn all_gather<T: Element>(&'scope self, input: &'scope [T], output: &'scope mut [T]) -> Result<Work<'scope>> {
        let (mut i, mut o) = (View::of(input), View::of_mut(output));
        let (ti, to) = (i.tensor(), o.tensor());
        self.start(vec![i, o], |g, w, err| unsafe { sys::dk_group_all_gather(g, ti, to, w, err) })
    }

    pub fn reduce_scatter<T: Element>(
        &'scope self,
        input: &'scope [T],
        output: &'scope mut [T],
        op: ReduceOp,
    ) -> Result<Work<'scope>> {
        let (mut i, mut o) = (View::of(input), View::of_mut(output));
        let (ti, to) = (i.tensor(), o.tensor());
        self.start(vec![i, o], |g, w, err| unsafe { sys::dk_group_reduce_scatter(g, ti, to, op.raw(), w, err) })
    }

    pub fn barrier(&'scope self) -> Result<Work<'scope>> {
        self.start(Vec::new(), |g, w, err| unsafe { sys::dk_group_barrier(g, w, err) })
    }

    pub fn send<T: Element>(&'scope self, data: &'scope [T], dst: i32, tag: i32) -> Result<Work<'scope>> {
        let mut v = View::of(data);
        let t = v.tensor();
        self.start(vec![v], |g, w, err| unsafe { sys::dk_group_send(g, t, dst, tag, w, err) })
    }

    pub fn recv<T: Element>(&'scope self, data: &'scope mut [T], src: i32, tag: i32) -> Result<Work<'scope>> {
        let mut v = View::of_mut(data);
        let t = v.tensor();
        self.start(vec![v], |g, w, err| unsafe { sys::dk_group_recv(g, t, src, tag, w, err) })
    }
}

/// An operation in flight. Dropping it waits for the operation (its error,
/// if any, is then lost: call `wait` to see it); it never panics.
pub struct Work<'scope> {
    works: &'scope RefCell<Vec<*mut sys::dk_work_t>>,
    index: usize,
    _views: Vec<Box<View>>,
}

impl<'scope> Work<'scope> {
    fn handle(&self) -> *mut sys::dk_work_t {
        self.works.borrow()[self.index]
    }

    /// Whether the operation has finished: Ok(true) when it succeeded,
    /// Ok(false) while it runs, its error if it failed.
    pub fn test(&self) -> Result<bool> {
        let mut state = sys::DK_WORK_PENDING;
        let w = self.handle();
        call(|err| unsafe { sys::dk_work_test(w, &mut state, err) })?;
        if state == sys::DK_WORK_FAILED {
            // dk_work_test reports only the state; dk_work_wait(work, 0, err)
            // returns the failed operation's error (see the header).
            call(|err| unsafe { sys::dk_work_wait(w, 0, err) })?;
            return Err(Error::new(Code::Internal, "distkit: the operation failed"));
        }
        Ok(state == sys::DK_WORK_SUCCEEDED)
    }

    /// Blocks until the operation finishes and returns its status.
    pub fn wait(self) -> Result<()> {
        let w = self.handle();
        call(|err| unsafe { sys::dk_work_wait(w, -1, err) })
        // Drop frees the handle.
    }
}

impl Drop for Work<'_> {
    fn drop(&mut self) {
        let w = std::mem::replace(&mut self.works.borrow_mut()[self.index], std::ptr::null_mut());
        if !w.is_null() {
            unsafe {
                sys::dk_work_wait(w, -1, std::ptr::null_mut());
                sys::dk_work_destroy(w);
            }
        }
    }
}

impl std::fmt::Debug for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Group").field("name", &self.name()).field("rank", &self.rank()).field("size", &self.size()).finish()
    }
}
