package distkit

/*
#include <stdlib.h>
#include <string.h>
#include "distkit/distkit.h"
*/
import "C"

import (
	"fmt"
	"math"
	"runtime"
	"unsafe"
)

// CommHook compresses float32 buckets before the all_reduce.
type CommHook int32

const (
	NoHook       CommHook = C.DK_COMM_HOOK_NONE
	Fp16Compress CommHook = C.DK_COMM_HOOK_FP16
	Bf16Compress CommHook = C.DK_COMM_HOOK_BF16
)

// ReducerOptions configure NewReducer; the zero value means torch DDP's
// defaults (25 MiB buckets, a 1 MiB first bucket, broadcast buffers).
type ReducerOptions struct {
	BucketCapMB          float64
	FirstBucketCapMB     float64
	FindUnusedParameters bool
	NoBroadcastBuffers   bool
	Hook                 CommHook
}

// Reducer averages gradients across a group, bucket by bucket, while
// backward runs (the engine of DDP). Per step: MarkReady(i, grad) for every
// parameter as its gradient is computed (a full bucket's all_reduce starts at
// once), then Finalize(grads) writes the averages. With FindUnusedParameters,
// a parameter this rank did not use (named in Prepare, or never marked ready)
// gets the average of the ranks that used it, and one no rank used gets
// zeros (GloballyUsed tells them apart). The library works on copies in C
// memory, so Go slices are never held across calls. Close it.
type Reducer[T Element] struct {
	ptr     *C.dk_reducer_t
	group   *Group           // its calls that issue collectives run as the group's (Group.issue)
	grads   []unsafe.Pointer // staging, C memory, one per parameter
	sizes   []int
	buffers []unsafe.Pointer
	bsizes  []int
	tensors tensors
	// marked: which parameters were marked ready in this iteration; the
	// library writes only their staged gradients at finalize.
	marked []bool
	// inIteration: Prepare or MarkReady since the last Finalize or Abandon
	// that succeeded, so buckets may be in flight (Close would wait).
	inIteration bool
	noSync      bool // SetRequireSync(false)
	// Where the buckets (and so dk_reducer_reduced_grad's memory) are: the
	// group's comm device, a CUDA one on "nccl".
	comm Device
}

func cCopy[T Element](s []T) unsafe.Pointer {
	var z T
	n := C.size_t(len(s)) * C.size_t(unsafe.Sizeof(z))
	p := C.malloc(n + 1)
	if len(s) > 0 {
		C.memcpy(p, unsafe.Pointer(&s[0]), n)
	}
	return p
}

func copyBack[T Element](dst []T, src unsafe.Pointer) {
	if len(dst) > 0 {
		copy(dst, unsafe.Slice((*T)(src), len(dst)))
	}
}

// NewReducer is collective over g: rank 0's params and buffers replace every
// rank's (written into the given slices).
func NewReducer[T Element](g *Group, params, buffers [][]T, o ReducerOptions) (*Reducer[T], error) {
	comm, err := g.CommDevice()
	if err != nil {
		return nil, err
	}
	r := &Reducer[T]{comm: comm, group: g}
	tensorOf := func(p unsafe.Pointer, n int) *C.DLTensor { return rawView[T](&r.tensors, p, n) }
	ptrs := make([]*C.DLTensor, 0, len(params)+len(buffers))
	r.marked = make([]bool, len(params))
	for _, p := range params {
		r.grads = append(r.grads, cCopy(p))
		r.sizes = append(r.sizes, len(p))
		ptrs = append(ptrs, tensorOf(r.grads[len(r.grads)-1], len(p)))
	}
	for _, b := range buffers {
		r.buffers = append(r.buffers, cCopy(b))
		r.bsizes = append(r.bsizes, len(b))
		ptrs = append(ptrs, tensorOf(r.buffers[len(r.buffers)-1], len(b)))
	}
	cptrs := (**C.DLTensor)(C.malloc(C.size_t(len(ptrs)+1) * C.size_t(unsafe.Sizeof((*C.DLTensor)(nil)))))
	defer C.free(unsafe.Pointer(cptrs))
	list := unsafe.Slice(cptrs, len(ptrs)+1)
	copy(list, ptrs)
	var config C.dk_reducer_config_t
	C.dk_reducer_config_init_sized(&config, C.size_t(unsafe.Sizeof(config)))
	if o.BucketCapMB > 0 {
		config.bucket_cap_mb = C.double(o.BucketCapMB)
	}
	if o.FirstBucketCapMB > 0 {
		config.first_bucket_cap_mb = C.double(o.FirstBucketCapMB)
	}
	if o.FindUnusedParameters {
		config.find_unused_parameters = 1
	}
	if o.NoBroadcastBuffers {
		config.broadcast_buffers = 0
	}
	config.comm_hook = C.int32_t(o.Hook)
	var cerr *C.dk_error_t
	var bufs **C.DLTensor
	if len(buffers) > 0 {
		bufs = &list[len(params)]
	}
	if err := g.issue("reducer_create", func() error {
		return check(C.dk_reducer_create(g.ptr, cptrs, C.size_t(len(params)), bufs, C.size_t(len(buffers)), &config, &r.ptr, &cerr), cerr)
	}); err != nil {
		r.release()
		return nil, err
	}
	for i, p := range params {
		copyBack(p, r.grads[i])
	}
	for i, b := range buffers {
		copyBack(b, r.buffers[i])
	}
	runtime.SetFinalizer(r, (*Reducer[T]).finalize)
	return r, nil
}

// finalize runs on Go's single finalizer goroutine, which must not block
// (as Work's): a reducer between iterations is freed at once; one with
// buckets possibly in flight, which dk_reducer_destroy waits for (up to the
// operation timeout with a slow or dead peer), on a goroutine of its own.
func (r *Reducer[T]) finalize() {
	if !r.inIteration {
		r.Close()
		return
	}
	go r.Close()
}

func (r *Reducer[T]) release() {
	for _, p := range r.grads {
		C.free(p)
	}
	for _, p := range r.buffers {
		C.free(p)
	}
	r.tensors.free()
	r.grads, r.buffers, r.tensors = nil, nil, nil
}

// Close waits for in-flight buckets and frees the reducer. A Reducer dropped
// mid-iteration is closed by a goroutine of its own (its finalizer never
// blocks, so it cannot hold up the program's other finalizers).
func (r *Reducer[T]) Close() {
	if r.ptr != nil {
		C.dk_reducer_destroy(r.ptr)
		r.ptr = nil
		r.release()
	}
	runtime.SetFinalizer(r, nil)
}

func (r *Reducer[T]) live() error {
	if r.ptr == nil {
		return &Error{FailedPrecondition, "distkit: the reducer is closed"}
	}
	return nil
}

// NumBuckets is the number of buckets (one all_reduce each).
func (r *Reducer[T]) NumBuckets() int {
	// Here and in every method: no finalizer closes the reducer while the
	// library works on it.
	defer runtime.KeepAlive(r)
	return int(C.dk_reducer_num_buckets(r.ptr))
}

// Prepare starts an iteration naming the parameters this rank did not use
// (FindUnusedParameters).
func (r *Reducer[T]) Prepare(unused []int) error {
	defer runtime.KeepAlive(r)
	if err := r.live(); err != nil {
		return err
	}
	u := make([]C.int32_t, len(unused))
	for i, v := range unused {
		if err := int32Arg("reducer_prepare", "unused parameter index", v); err != nil {
			return err
		}
		u[i] = C.int32_t(v)
	}
	var p *C.int32_t
	if len(u) > 0 {
		p = &u[0]
	}
	var cerr *C.dk_error_t
	r.inIteration = true
	return r.group.issue("reducer_prepare", func() error { return check(C.dk_reducer_prepare(r.ptr, p, C.size_t(len(u)), &cerr), cerr) })
}

// MarkReady hands parameter i's final gradient over (it is copied).
func (r *Reducer[T]) MarkReady(i int, grad []T) error {
	defer runtime.KeepAlive(r)
	if err := r.live(); err != nil {
		return err
	}
	if i < 0 || i >= len(r.grads) {
		return &Error{OutOfRange, fmt.Sprintf("reducer: parameter index %d out of range [0, %d)", i, len(r.grads))}
	}
	if len(grad) != r.sizes[i] {
		return &Error{InvalidArgument, fmt.Sprintf("reducer: gradient %d has %d elements, the parameter %d", i, len(grad), r.sizes[i])}
	}
	copy(unsafe.Slice((*T)(r.grads[i]), r.sizes[i]), grad)
	var ts tensors
	defer ts.free()
	t := rawView[T](&ts, r.grads[i], r.sizes[i])
	var cerr *C.dk_error_t
	r.inIteration = true
	if err := r.group.issue("reducer_mark_ready", func() error { return check(C.dk_reducer_mark_ready(r.ptr, C.int32_t(i), t, &cerr), cerr) }); err != nil {
		return err
	}
	r.marked[i] = true
	return nil
}

// Finalize waits for every bucket and writes the averaged gradients into
// grads (one slice per parameter, as given to MarkReady). With
// FindUnusedParameters, a parameter this rank did not mark ready gets the
// other ranks' average (zeros where no rank used it).
func (r *Reducer[T]) Finalize(grads [][]T) error {
	defer runtime.KeepAlive(r)
	if err := r.live(); err != nil {
		return err
	}
	// The iteration ends here whatever finalize answers.
	marked := r.marked
	r.marked = make([]bool, len(r.grads))
	var cerr *C.dk_error_t
	if err := r.group.issue("reducer_finalize", func() error { return check(C.dk_reducer_finalize(r.ptr, &cerr), cerr) }); err != nil {
		return err
	}
	r.inIteration = false // every bucket was waited for
	if !r.noSync {
		// The library writes only the gradients given to MarkReady; a
		// parameter unused here but used elsewhere has its average in the
		// reducer's memory alone (dk_reducer_reduced_grad).
		for i, m := range marked {
			if m {
				continue
			}
			staged := unsafe.Slice((*T)(r.grads[i]), r.sizes[i])
			if C.dk_reducer_globally_used(r.ptr, C.int32_t(i)) == 0 {
				// No rank used it: zeros (what its bucket averaged).
				var zero T
				for k := range staged {
					staged[k] = zero
				}
				continue
			}
			// The parameter's type and length on the comm device (a CUDA one
			// on "nccl"), borrowed until the next iteration: copied now,
			// across devices if need be.
			var data unsafe.Pointer
			var rerr *C.dk_error_t
			if err := check(C.dk_reducer_reduced_grad(r.ptr, C.int32_t(i), &data, &rerr), rerr); err != nil {
				return err
			}
			var ts tensors
			src := tensor[T](&ts, data, r.sizes[i], r.comm)
			dst := rawView[T](&ts, r.grads[i], r.sizes[i])
			err := check(C.dk_tensor_copy(src, dst, &rerr), rerr)
			ts.free()
			if err != nil {
				return err
			}
		}
	}
	for i := 0; i < len(grads) && i < len(r.grads); i++ {
		if len(grads[i]) != r.sizes[i] {
			return &Error{InvalidArgument, fmt.Sprintf("reducer: grads[%d] has %d elements, the parameter %d", i, len(grads[i]), r.sizes[i])}
		}
		copyBack(grads[i], r.grads[i])
	}
	return nil
}

// Abandon ends an iteration that will not be finalized because this rank's
// backward failed: it waits for the buckets already launched and forgets the
// gradients marked ready, so that the next iteration starts afresh (marking
// them again is no "marked ready twice"). Local: every rank whose backward
// failed calls it; a rank whose backward succeeded is left waiting in
// Finalize, as with torch's DDP. Does nothing outside an iteration.
func (r *Reducer[T]) Abandon() error {
	defer runtime.KeepAlive(r)
	if err := r.live(); err != nil {
		return err
	}
	r.marked = make([]bool, len(r.grads))
	var cerr *C.dk_error_t
	if err := r.group.issue("reducer_abandon", func() error { return check(C.dk_reducer_abandon(r.ptr, &cerr), cerr) }); err != nil {
		return err
	}
	r.inIteration = false // the launched buckets were waited for
	return nil
}

// SetRequireSync(false) is no_sync: MarkReady and Finalize do nothing
// (Finalize writes the gradients last given to MarkReady).
func (r *Reducer[T]) SetRequireSync(sync bool) {
	defer runtime.KeepAlive(r)
	if r.ptr != nil {
		r.noSync = !sync
		v := C.int32_t(0)
		if sync {
			v = 1
		}
		C.dk_reducer_set_require_sync(r.ptr, v)
	}
}

// BroadcastBuffers is collective: rank 0's buffers replace every rank's
// (the slices given must be those given to NewReducer, in order).
func (r *Reducer[T]) BroadcastBuffers(buffers [][]T) error {
	defer runtime.KeepAlive(r)
	if err := r.live(); err != nil {
		return err
	}
	if len(buffers) != len(r.buffers) {
		return &Error{InvalidArgument, fmt.Sprintf("reducer: %d buffers given, %d registered", len(buffers), len(r.buffers))}
	}
	for i, b := range buffers {
		if len(b) != r.bsizes[i] {
			return &Error{InvalidArgument, fmt.Sprintf("reducer: buffer %d has %d elements, registered %d", i, len(b), r.bsizes[i])}
		}
		copy(unsafe.Slice((*T)(r.buffers[i]), len(b)), b)
	}
	var cerr *C.dk_error_t
	if err := r.group.issue("reducer_broadcast_buffers", func() error { return check(C.dk_reducer_broadcast_buffers(r.ptr, &cerr), cerr) }); err != nil {
		return err
	}
	for i, b := range buffers {
		copyBack(b, r.buffers[i])
	}
	return nil
}

// GloballyUsed reports whether any rank used parameter i (FindUnusedParameters);
// false for an index out of range, as the library answers.
func (r *Reducer[T]) GloballyUsed(i int) bool {
	defer runtime.KeepAlive(r)
	// An index no int32 holds is out of range: converted, it would wrap onto
	// another parameter's.
	if i < 0 || i > math.MaxInt32 {
		return false
	}
	return r.ptr != nil && C.dk_reducer_globally_used(r.ptr, C.int32_t(i)) != 0
}
