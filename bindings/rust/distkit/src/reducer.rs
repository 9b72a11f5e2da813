//! Data-parallel gradient averaging (the engine of DDP) for Rust trainers.
use distkit_sys as sys;

use crate::element::{Element, View};
use crate::error::{call, Code, Error, Result};
use crate::group::Group;

/// Compression applied to float32 buckets before the all_reduce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommHook {
    None,
    Fp16Compress,
    Bf16Compress,
}

/// Options of `Reducer::new` (torch DDP's defaults).
#[derive(Clone, Debug)]
pub struct ReducerOptions {
    pub bucket_cap_mb: f64,
    pub first_bucket_cap_mb: f64,
    pub find_unused_parameters: bool,
    pub broadcast_buffers: bool,
    pub comm_hook: CommHook,
}

impl Default for ReducerOptions {
    fn default() -> Self {
        ReducerOptions {
            bucket_cap_mb: 25.0,
            first_bucket_cap_mb: 1.0,
            find_unused_parameters: false,
            broadcast_buffers: true,
            comm_hook: CommHook::None,
        }
    }
}

/// Averages gradients across a group, bucket by bucket, while backward runs.
/// It owns the parameter and buffer vectors (the library reads and writes
/// them for its whole life); reach them through `params_mut` / `params`.
///
/// Per step: compute gradient i, `mark_ready(i, &grad)` (may start a bucket's
/// all_reduce at once), ..., then `finalize()` returns the averages. With
/// `find_unused_parameters`, a parameter this rank did not use (named in
/// `prepare`, or never marked ready) gets the average of the ranks that used
/// it, and one no rank used gets zeros (`globally_used` tells them apart).
pub struct Reducer<'g, T: Element> {
    ptr: *mut sys::dk_reducer_t,
    params: Vec<Vec<T>>,
    buffers: Vec<Vec<T>>,
    // Copies of the gradients handed to mark_ready, written by finalize.
    staged: Vec<Vec<T>>,
    // Which parameters were marked ready in this iteration: the library
    // writes only their staged gradients at finalize.
    marked: Vec<bool>,
    require_sync: bool,
    // Where the reducer's buckets (and so dk_reducer_reduced_grad's memory)
    // are: the group's comm device, a CUDA one on "nccl".
    comm: sys::DLDevice,
    _views: Vec<Box<View>>,
    _group: std::marker::PhantomData<&'g Group>,
}

impl<'g, T: Element> Reducer<'g, T> {
    /// Collective: rank 0's parameters and buffers replace every rank's.
    pub fn new(group: &'g Group, params: Vec<Vec<T>>, buffers: Vec<Vec<T>>, options: &ReducerOptions) -> Result<Self> {
        let mut params = params;
        let mut buffers = buffers;
        let mut views: Vec<Box<View>> = params.iter_mut().chain(buffers.iter_mut()).map(|v| View::of_mut(v)).collect();
        let ptrs: Vec<*mut sys::DLTensor> = views.iter_mut().map(|v| v.tensor()).collect();
        let (pp, bp) = ptrs.split_at(params.len());
        let mut config = unsafe {
            let mut c = std::mem::zeroed::<sys::dk_reducer_config_t>();
            let size = std::mem::size_of::<sys::dk_reducer_config_t>();
            sys::dk_reducer_config_init_sized(&mut c, size);
            c
        };
        config.bucket_cap_mb = options.bucket_cap_mb;
        config.first_bucket_cap_mb = options.first_bucket_cap_mb;
        config.find_unused_parameters = options.find_unused_parameters as i32;
        config.broadcast_buffers = options.broadcast_buffers as i32;
        config.comm_hook = match options.comm_hook {
            CommHook::None => sys::DK_COMM_HOOK_NONE,
            CommHook::Fp16Compress => sys::DK_COMM_HOOK_FP16,
            CommHook::Bf16Compress => sys::DK_COMM_HOOK_BF16,
        };
        let mut comm = sys::DLDevice { device_type: sys::kDLCPU, device_id: 0 };
        call(|err| unsafe { sys::dk_group_comm_device(group.raw(), &mut comm, err) })?;
        let mut out = std::ptr::null_mut();
        call(|err| unsafe {
            sys::dk_reducer_create(group.raw(), pp.as_ptr(), pp.len(), bp.as_ptr(), bp.len(), &config, &mut out, err)
        })?;
        let staged = params.iter().map(|p| p.clone()).collect();
        let marked = vec![false; params.len()];
        Ok(Reducer {
            ptr: out,
            params,
            buffers,
            staged,
            marked,
            require_sync: true,
            comm,
            _views: views,
            _group: std::marker::PhantomData,
        })
    }

    pub fn params(&self) -> &[Vec<T>] {
        &self.params
    }
    /// Parameters, to update after `finalize` (the optimizer step). Slices:
    /// the library holds their addresses, so they cannot be resized.
    pub fn params_mut(&mut self) -> Vec<&mut [T]> {
        self.params.iter_mut().map(|p| &mut p[..]).collect()
    }
    pub fn buffers(&self) -> &[Vec<T>] {
        &self.buffers
    }
    pub fn buffers_mut(&mut self) -> Vec<&mut [T]> {
        self.buffers.iter_mut().map(|b| &mut b[..]).collect()
    }
    /// Parameters and the averaged gradients of the last `finalize`, together
    /// (for the optimizer step).
    pub fn params_and_grads(&mut self) -> (Vec<&mut [T]>, &[Vec<T>]) {
        (self.params.iter_mut().map(|p| &mut p[..]).collect(), &self.staged)
    }
    pub fn num_buckets(&self) -> usize {
        unsafe { sys::dk_reducer_num_buckets(self.ptr) as usize }
    }

    /// Starts an iteration naming the parameters this rank did not use
    /// (find_unused_parameters).
    pub fn prepare(&mut self, unused: &[i32]) -> Result<()> {
        call(|err| unsafe { sys::dk_reducer_prepare(self.ptr, unused.as_ptr(), unused.len(), err) })
    }

    /// Parameter `index`'s gradient is final; it is copied, so `grad` may be
    /// reused at once.
    pub fn mark_ready(&mut self, index: usize, grad: &[T]) -> Result<()> {
        let slot = self
            .staged
            .get_mut(index)
            .ok_or_else(|| Error::new(Code::OutOfRange, format!("reducer: parameter index {index} out of range")))?;
        if slot.len() != grad.len() {
            return Err(Error::new(
                Code::InvalidArgument,
                format!("reducer: gradient {index} has {} elements, the parameter {}", grad.len(), slot.len()),
            ));
        }
        slot.copy_from_slice(grad);
        let mut v = View::of_mut(slot);
        call(|err| unsafe { sys::dk_reducer_mark_ready(self.ptr, index as i32, v.tensor(), err) })?;
        self.marked[index] = true;
        Ok(())
    }

    /// Waits for every bucket; returns the averaged gradients. With
    /// `find_unused_parameters`, a parameter this rank did not mark ready gets
    /// the other ranks' average (zeros where no rank used it).
    pub fn finalize(&mut self) -> Result<&[Vec<T>]> {
        // The iteration ends here whatever finalize answers.
        let marked = std::mem::replace(&mut self.marked, vec![false; self.staged.len()]);
        call(|err| unsafe { sys::dk_reducer_finalize(self.ptr, err) })?;
        if self.require_sync {
            // The library writes only the gradients handed to mark_ready; a
            // parameter unused here but used elsewhere has its average in the
            // reducer's memory alone (dk_reducer_reduced_grad).
            for (i, _) in marked.iter().enumerate().filter(|(_, &m)| !m) {
                if self.globally_used(i) {
                    let mut data = std::ptr::null_mut();
                    call(|err| unsafe { sys::dk_reducer_reduced_grad(self.ptr, i as i32, &mut data, err) })?;
                    // The parameter's dtype and element count on the comm
                    // device (a CUDA one on "nccl"), borrowed until the next
                    // iteration: copied now, across devices if need be.
                    let slot = &mut self.staged[i];
                    let mut src = View::on(data as *const T, slot.len(), self.comm);
                    let mut dst = View::of_mut(slot);
                    call(|err| unsafe { sys::dk_tensor_copy(src.tensor(), dst.tensor(), err) })?;
                } else {
                    // No rank used it: zeros (what its bucket averaged).
                    // All zero bytes are a zero of every Element type.
                    let slot = &mut self.staged[i];
                    unsafe { std::ptr::write_bytes(slot.as_mut_ptr(), 0, slot.len()) };
                }
            }
        }
        Ok(&self.staged)
    }

    /// Ends an iteration that will not be finalized because this rank's
    /// backward failed: waits for the buckets already launched and forgets
    /// the gradients marked ready, so that the next iteration starts afresh
    /// (marking them again is no "marked ready twice"). Local; every rank
    /// whose backward failed calls it, and a rank whose backward succeeded
    /// is left waiting in `finalize`, as with torch's DDP. Does nothing
    /// outside an iteration.
    pub fn abandon(&mut self) -> Result<()> {
        self.marked = vec![false; self.staged.len()];
        call(|err| unsafe { sys::dk_reducer_abandon(self.ptr, err) })
    }

    /// no_sync: while false, mark_ready and finalize do nothing (finalize
    /// returns the gradients last handed to mark_ready).
    pub fn set_require_sync(&mut self, require_sync: bool) {
        self.require_sync = require_sync;
        unsafe { sys::dk_reducer_set_require_sync(self.ptr, require_sync as i32) }
    }

    /// Collective: rank 0's buffers replace every rank's.
    pub fn broadcast_buffers(&mut self) -> Result<()> {
        call(|err| unsafe { sys::dk_reducer_broadcast_buffers(self.ptr, err) })
    }

    /// Whether any rank used parameter `index` (find_unused_parameters);
    /// false for an index out of range, as the library answers.
    pub fn globally_used(&self, index: usize) -> bool {
        // An index no i32 holds is out of range: `as i32` would wrap it onto
        // another parameter's (1 << 32 onto 0).
        match i32::try_from(index) {
            Ok(index) => unsafe { sys::dk_reducer_globally_used(self.ptr, index) != 0 },
            Err(_) => false,
        }
    }
}

impl<T: Element> Drop for Reducer<'_, T> {
    fn drop(&mut self) {
        // Waits for in-flight buckets before the vectors are freed.
        unsafe { sys::dk_reducer_destroy(self.ptr) }
    }
}
