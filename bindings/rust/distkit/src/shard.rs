//! Fully sharded data parallelism (the engine of FSDP) for Rust trainers:
//! a unit's parameters live sharded across the group; each step gathers
//! them, computes, reduces the gradients into this rank's shard, and the
//! optimizer steps the shard.
use std::os::raw::c_void;

use distkit_sys as sys;

use crate::element::{DataType, Element, View};
use crate::error::{call, Code, Error, Result};
use crate::group::Group;

/// torch's ShardingStrategy (the hybrid ones need a replicate group).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShardingStrategy {
    /// Free the full parameters after forward.
    FullShard,
    /// Keep them until after backward.
    ShardGradOp,
    /// No sharding: gradients all-reduced, as DDP.
    NoShard,
}

/// Options of `Shard::new`.
#[derive(Clone, Debug)]
pub struct ShardOptions {
    pub strategy: ShardingStrategy,
    /// Broadcast rank 0's values before sharding.
    pub sync_module_states: bool,
    /// Gather and compute in this dtype (mixed precision); None: the parameters'.
    pub param_dtype: Option<DataType>,
}

impl Default for ShardOptions {
    fn default() -> Self {
        ShardOptions { strategy: ShardingStrategy::FullShard, sync_module_states: true, param_dtype: None }
    }
}

/// What happened to a unit (see `Shard::take_events`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShardEventKind {
    /// An all-gather of the full parameters was started ...
    UnshardStart,
    /// ... and waited for.
    UnshardDone,
    /// The full parameters were freed.
    Reshard,
    /// A gradient reduction was started ...
    ReduceStart,
    /// ... and added into the shard gradient.
    ReduceDone,
}

/// One entry of a unit's timeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShardEvent {
    pub kind: ShardEventKind,
    /// When, in nanoseconds since the Unix epoch (the system clock).
    pub unix_ns: i64,
}

/// One sharded unit over `group`. The parameters given to `new` are read
/// (rank 0's with sync_module_states) and may be dropped afterwards: from
/// then on the unit holds them, one shard per rank.
pub struct Shard<'g> {
    ptr: *mut sys::dk_shard_t,
    lens: Vec<usize>,
    dtypes: Vec<DataType>,
    _group: std::marker::PhantomData<&'g Group>,
}

fn dtype_of(code: sys::dk_dtype_t) -> DataType {
    match code {
        sys::DK_FLOAT16 => DataType::Float16,
        sys::DK_BFLOAT16 => DataType::BFloat16,
        sys::DK_FLOAT64 => DataType::Float64,
        _ => DataType::Float32,
    }
}

impl<'g> Shard<'g> {
    /// Collective: every rank registers the same parameters (count, dtype,
    /// length), else an InvalidArgument error on every rank naming the first
    /// difference.
    pub fn new<T: Element>(group: &'g Group, params: &[&[T]], options: &ShardOptions) -> Result<Self> {
        let mut views: Vec<Box<View>> = params.iter().map(|p| View::of(p)).collect();
        let ptrs: Vec<*mut sys::DLTensor> = views.iter_mut().map(|v| v.tensor()).collect();
        let mut config = unsafe {
            let mut c = std::mem::zeroed::<sys::dk_shard_config_t>();
            let size = std::mem::size_of::<sys::dk_shard_config_t>();
            sys::dk_shard_config_init_sized(&mut c, size);
            c
        };
        config.strategy = match options.strategy {
            ShardingStrategy::FullShard => sys::DK_SHARD_FULL_SHARD,
            ShardingStrategy::ShardGradOp => sys::DK_SHARD_SHARD_GRAD_OP,
            ShardingStrategy::NoShard => sys::DK_SHARD_NO_SHARD,
        };
        config.sync_module_states = options.sync_module_states as i32;
        config.param_dtype = options.param_dtype.map(|d| d.raw()).unwrap_or(sys::DK_DTYPE_UNSET);
        let mut out = std::ptr::null_mut();
        call(|err| unsafe {
            sys::dk_shard_create(group.raw(), ptrs.as_ptr(), ptrs.len(), std::ptr::null(), &config, &mut out, err)
        })?;
        let compute = options.param_dtype.unwrap_or(T::DTYPE);
        Ok(Shard {
            ptr: out,
            lens: params.iter().map(|p| p.len()).collect(),
            dtypes: vec![compute; params.len()],
            _group: std::marker::PhantomData,
        })
    }

    fn check_index<T: Element>(&self, index: usize, what: &str) -> Result<usize> {
        let len = *self
            .lens
            .get(index)
            .ok_or_else(|| Error::new(Code::OutOfRange, format!("shard: parameter index {index} out of range")))?;
        if self.dtypes[index] != T::DTYPE {
            return Err(Error::new(
                Code::InvalidArgument,
                format!("shard: {what} {index} is {:?}, not {:?}", self.dtypes[index], T::DTYPE),
            ));
        }
        Ok(len)
    }

    /// Collective: gathers the full parameters (blocking).
    pub fn unshard(&mut self) -> Result<()> {
        call(|err| unsafe { sys::dk_shard_unshard(self.ptr, err) })
    }
    /// Collective: starts the gather and returns at once (prefetch); `wait_unshard` ends it.
    pub fn start_unshard(&mut self) -> Result<()> {
        call(|err| unsafe { sys::dk_shard_unshard_start(self.ptr, err) })
    }
    pub fn wait_unshard(&mut self) -> Result<()> {
        call(|err| unsafe { sys::dk_shard_unshard_wait(self.ptr, err) })
    }
    /// Frees the full parameters.
    pub fn reshard(&mut self) -> Result<()> {
        call(|err| unsafe { sys::dk_shard_reshard(self.ptr, err) })
    }

    /// Parameter `index`'s full values (after `unshard`, until `reshard`).
    pub fn full_param<T: Element>(&self, index: usize) -> Result<&[T]> {
        let len = self.check_index::<T>(index, "parameter")?;
        let mut data: *mut c_void = std::ptr::null_mut();
        call(|err| unsafe { sys::dk_shard_full_param(self.ptr, index as i32, &mut data, err) })?;
        // SAFETY: the library lends `len` elements until `reshard`, which
        // needs `&mut self` while this borrow lives.
        let data = lent(data as *mut T, len, "full parameter")?;
        Ok(unsafe { std::slice::from_raw_parts(data, len) })
    }

    /// Adds parameter `index`'s gradient (its length; any float type).
    pub fn accumulate_grad<T: Element>(&mut self, index: usize, grad: &[T]) -> Result<()> {
        let index = c_index(index, "parameter")?;
        let mut v = View::of(grad);
        call(|err| unsafe { sys::dk_shard_accumulate_grad(self.ptr, index, v.tensor(), err) })
    }

    /// Collective: averages every rank's gradients into this rank's shard gradient.
    pub fn reduce_grads(&mut self) -> Result<()> {
        call(|err| unsafe { sys::dk_shard_reduce_grads(self.ptr, err) })
    }

    /// Collective: starts `reduce_grads` and returns, so the reduction runs
    /// while the caller computes; `reduce_grads_wait` finishes it (the shard
    /// gradient is stale until then).
    pub fn reduce_grads_start(&mut self) -> Result<()> {
        call(|err| unsafe { sys::dk_shard_reduce_grads_start(self.ptr, err) })
    }

    pub fn reduce_grads_wait(&mut self) -> Result<()> {
        call(|err| unsafe { sys::dk_shard_reduce_grads_wait(self.ptr, err) })
    }

    /// no_sync: while false, reduce_grads keeps accumulating locally.
    pub fn set_require_sync(&mut self, require_sync: bool) {
        unsafe { sys::dk_shard_set_require_sync(self.ptr, require_sync as i32) }
    }

    pub fn num_flat(&self) -> usize {
        unsafe { sys::dk_shard_num_flat(self.ptr) as usize }
    }

    /// Flat buffer `flat`'s local shard (values, for the optimizer to update)
    /// and its gradient.
    pub fn local<T: Element>(&mut self, flat: usize) -> Result<(&mut [T], &[T])> {
        let (mut data, mut grad): (*mut c_void, *mut c_void) = (std::ptr::null_mut(), std::ptr::null_mut());
        let (mut n, mut dtype) = (0i64, 0 as sys::dk_dtype_t);
        let index = c_index(flat, "flat buffer")?;
        call(|err| unsafe { sys::dk_shard_local(self.ptr, index, &mut data, &mut grad, &mut n, &mut dtype, err) })?;
        if dtype_of(dtype) != T::DTYPE {
            return Err(Error::new(
                Code::InvalidArgument,
                format!("shard: flat buffer {flat} is {:?}, not {:?}", dtype_of(dtype), T::DTYPE),
            ));
        }
        let n = usize::try_from(n).map_err(|_| Error::new(Code::Internal, format!("shard: flat buffer {flat} has {n} elements")))?;
        // SAFETY: the library lends both for the unit's lifetime; `&mut self`
        // keeps them unaliased while borrowed.
        let (data, grad) = (lent(data as *mut T, n, "local values")?, lent(grad as *mut T, n, "local gradient")?);
        unsafe { Ok((std::slice::from_raw_parts_mut(data, n), std::slice::from_raw_parts(grad, n))) }
    }

    /// Zeroes the shard gradients (after the optimizer step).
    pub fn zero_grads(&mut self) {
        unsafe { sys::dk_shard_zero_grads(self.ptr) }
    }

    /// Collective: every parameter's full values, into `outs` (their lengths).
    pub fn gather_full<T: Element>(&mut self, outs: &mut [Vec<T>]) -> Result<()> {
        let mut views: Vec<Box<View>> = outs.iter_mut().map(|o| View::of_mut(o)).collect();
        let ptrs: Vec<*mut sys::DLTensor> = views.iter_mut().map(|v| v.tensor()).collect();
        call(|err| unsafe { sys::dk_shard_gather_full(self.ptr, ptrs.as_ptr(), ptrs.len(), 0, err) })
    }

    /// Local: loads a sharded checkpoint, or the shards a `ShardedSnapshot`
    /// fetched, saved by a group of `saved_world_size` ranks:
    /// `saved[flat * saved_world_size + rank]` is that rank's `local` values
    /// of flat buffer `flat` (`None` where this rank does not need it, as
    /// every shard but its own when the size is the same). It re-shards from
    /// any number of ranks; another unit's checkpoint is
    /// `Code::InvalidArgument`.
    pub fn load_sharded<T: Element>(&mut self, saved_world_size: i32, saved: &[Option<&[T]>]) -> Result<()> {
        let mut views: Vec<Option<Box<View>>> = saved.iter().map(|s| s.map(View::of)).collect();
        let ptrs: Vec<*const sys::DLTensor> = views
            .iter_mut()
            .map(|v| v.as_mut().map_or(std::ptr::null(), |v| v.tensor() as *const sys::DLTensor))
            .collect();
        call(|err| unsafe { sys::dk_shard_load_sharded(self.ptr, saved_world_size, ptrs.as_ptr(), ptrs.len(), err) })
    }

    /// The events recorded since the last call, oldest first (a unit keeps
    /// its newest 4096), so a trainer can see its gathers overlap compute.
    /// An event of a kind the header does not define (a newer library's) is
    /// skipped; the others are kept.
    pub fn take_events(&mut self) -> Result<Vec<ShardEvent>> {
        let mut buf = vec![sys::dk_shard_event_t::default(); 4096];
        let mut n = 0usize;
        call(|err| unsafe { sys::dk_shard_take_events(self.ptr, buf.as_mut_ptr(), buf.len(), &mut n, err) })?;
        Ok(known_events(&buf[..n.min(buf.len())]))
    }

    /// Bytes the unit holds now (shards, gradients, full buffers).
    pub fn held_bytes(&self) -> i64 {
        unsafe { sys::dk_shard_held_bytes(self.ptr) }
    }

    /// The most bytes the unit held at once since it was created.
    pub fn peak_held_bytes(&self) -> i64 {
        unsafe { sys::dk_shard_peak_held_bytes(self.ptr) }
    }
}

impl Drop for Shard<'_> {
    fn drop(&mut self) {
        unsafe { sys::dk_shard_destroy(self.ptr) }
    }
}

/// A pointer `from_raw_parts` may take for `len` elements the library lent
/// at `data`: a dangling, aligned one when `len` is 0 (a unit whose
/// parameters are all empty may lend NULL, which a slice must never hold);
/// NULL with elements is `Code::Internal`.
fn lent<T>(data: *mut T, len: usize, what: &str) -> Result<*mut T> {
    if len == 0 {
        return Ok(std::ptr::NonNull::dangling().as_ptr());
    }
    if data.is_null() {
        return Err(Error::new(Code::Internal, format!("shard: the library lent a NULL {what} of {len} elements")));
    }
    Ok(data)
}

/// The events the header defines (`DK_SHARD_EVENT_*`), in order. A kind it
/// does not (a newer library's) is skipped: the events were moved out of
/// the library, so failing here would lose the known ones with it.
fn known_events(raw: &[sys::dk_shard_event_t]) -> Vec<ShardEvent> {
    raw.iter()
        .filter_map(|e| {
            let kind = match e.kind {
                sys::DK_SHARD_EVENT_UNSHARD_START => ShardEventKind::UnshardStart,
                sys::DK_SHARD_EVENT_UNSHARD_DONE => ShardEventKind::UnshardDone,
                sys::DK_SHARD_EVENT_RESHARD => ShardEventKind::Reshard,
                sys::DK_SHARD_EVENT_REDUCE_START => ShardEventKind::ReduceStart,
                sys::DK_SHARD_EVENT_REDUCE_DONE => ShardEventKind::ReduceDone,
                _ => return None,
            };
            Some(ShardEvent { kind, unix_ns: e.unix_ns })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(kind: i32, unix_ns: i64) -> sys::dk_shard_event_t {
        sys::dk_shard_event_t { kind, unix_ns, ..Default::default() }
    }

    #[test]
    fn unknown_event_kinds_keep_the_known_ones() {
        let events = known_events(&[raw(sys::DK_SHARD_EVENT_UNSHARD_START, 1), raw(99, 2), raw(sys::DK_SHARD_EVENT_REDUCE_DONE, 3), raw(-1, 4)]);
        let want = [
            ShardEvent { kind: ShardEventKind::UnshardStart, unix_ns: 1 },
            ShardEvent { kind: ShardEventKind::ReduceDone, unix_ns: 3 },
        ];
        assert_eq!(events, want);
    }

    #[test]
    fn null_lent_pointers() {
        let empty = lent::<f64>(std::ptr::null_mut(), 0, "x").unwrap();
        assert!(!empty.is_null() && empty as usize % std::mem::align_of::<f64>() == 0);
        let e = lent::<f32>(std::ptr::null_mut(), 2, "x").expect_err("NULL with elements");
        assert_eq!(e.code(), Code::Internal, "{e}");
        let mut v = [1.0f32, 2.0];
        assert_eq!(lent(v.as_mut_ptr(), 2, "x").unwrap(), v.as_mut_ptr());
    }
}

/// An index in the ABI's int32_t; `as i32` would wrap a large one onto
/// another, possibly valid, index.
fn c_index(index: usize, what: &str) -> Result<i32> {
    i32::try_from(index).map_err(|_| Error::new(Code::InvalidArgument, format!("shard: {what} index {index} is out of range")))
}
