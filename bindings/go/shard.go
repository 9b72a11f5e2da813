package distkit

/*
#include <stdlib.h>
#include "distkit/distkit.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"time"
	"unsafe"
)

// ShardingStrategy is torch's (the hybrid strategies need a replicate group
// and are not offered here yet).
type ShardingStrategy int32

const (
	FullShard   ShardingStrategy = C.DK_SHARD_FULL_SHARD    // free the full parameters after forward
	ShardGradOp ShardingStrategy = C.DK_SHARD_SHARD_GRAD_OP // keep them until after backward
	NoShard     ShardingStrategy = C.DK_SHARD_NO_SHARD      // all_reduce, as DDP
)

// ShardOptions configure NewShard; the zero value is FULL_SHARD without
// syncing rank 0's values.
type ShardOptions struct {
	Strategy         ShardingStrategy
	SyncModuleStates bool
}

// Shard is one sharded unit (the engine of FSDP): the parameters given to
// NewShard live split across the group, one shard per rank. Per step:
// Unshard, read FullParam, Reshard, AccumulateGrad for every parameter,
// ReduceGrads, then update Local's values with its gradient and ZeroGrads.
//
// Close it when done: only Close frees the unit. It has no finalizer, because
// Local's slices point into the unit's memory and the garbage collector does
// not see them: a finalizer could free the unit while a slice taken from it
// is still in use (as a memory-mapped slice, it lives until it is unmapped).
// A Shard dropped without Close leaks its memory instead.
type Shard[T Element] struct {
	ptr   *C.dk_shard_t
	sizes []int
	group *Group // its calls that issue collectives run as the group's (Group.issue)
}

// NewShard is collective over g: every rank registers the same parameters
// (count, length), else an InvalidArgument error on every rank.
func NewShard[T Element](g *Group, params [][]T, o ShardOptions) (*Shard[T], error) {
	// The C tensors point into params, and g's finalizer must not close the
	// group during the call.
	defer runtime.KeepAlive(params)
	defer runtime.KeepAlive(g)
	var ts tensors
	defer ts.free()
	s := &Shard[T]{group: g}
	for _, p := range params {
		s.sizes = append(s.sizes, len(p))
	}
	cptrs := viewArray(&ts, params)
	defer C.free(unsafe.Pointer(cptrs))
	var config C.dk_shard_config_t
	C.dk_shard_config_init_sized(&config, C.size_t(unsafe.Sizeof(config)))
	config.strategy = C.int32_t(o.Strategy)
	if o.SyncModuleStates {
		config.sync_module_states = 1
	}
	var cerr *C.dk_error_t
	if err := g.issue("shard_create", func() error {
		return check(C.dk_shard_create(g.ptr, cptrs, C.size_t(len(params)), nil, &config, &s.ptr, &cerr), cerr)
	}); err != nil {
		return nil, err
	}
	return s, nil
}

// Close frees the unit; the slices Local returned are invalid after it.
func (s *Shard[T]) Close() {
	if s.ptr != nil {
		C.dk_shard_destroy(s.ptr)
		s.ptr = nil
	}
}

func (s *Shard[T]) live() error {
	if s.ptr == nil {
		return &Error{FailedPrecondition, "distkit: the shard is closed"}
	}
	return nil
}

// call makes one call of the unit's that takes only it and the error.
func (s *Shard[T]) call(f func(p *C.dk_shard_t, e **C.dk_error_t) C.dk_status_t) error {
	if err := s.live(); err != nil {
		return err
	}
	// The unit has no finalizer (see Shard), so nothing closes it during the
	// call; the methods' KeepAlives only make that explicit.
	defer runtime.KeepAlive(s)
	var cerr *C.dk_error_t
	return s.group.issue("shard", func() error { return check(f(s.ptr, &cerr), cerr) })
}

// Unshard is collective: it gathers the full parameters.
func (s *Shard[T]) Unshard() error {
	return s.call(func(p *C.dk_shard_t, e **C.dk_error_t) C.dk_status_t { return C.dk_shard_unshard(p, e) })
}

// UnshardStart is collective: it starts gathering the full parameters and
// returns at once (prefetch), so the caller computes meanwhile; UnshardWait
// ends it.
func (s *Shard[T]) UnshardStart() error {
	return s.call(func(p *C.dk_shard_t, e **C.dk_error_t) C.dk_status_t { return C.dk_shard_unshard_start(p, e) })
}

// UnshardWait waits for UnshardStart's gather.
func (s *Shard[T]) UnshardWait() error {
	return s.call(func(p *C.dk_shard_t, e **C.dk_error_t) C.dk_status_t { return C.dk_shard_unshard_wait(p, e) })
}

// Reshard frees the full parameters.
func (s *Shard[T]) Reshard() error {
	return s.call(func(p *C.dk_shard_t, e **C.dk_error_t) C.dk_status_t { return C.dk_shard_reshard(p, e) })
}

// FullParam copies parameter i's full values into dst (after Unshard).
func (s *Shard[T]) FullParam(i int, dst []T) error {
	defer runtime.KeepAlive(s) // copyBack reads the unit's memory
	if err := s.live(); err != nil {
		return err
	}
	if i < 0 || i >= len(s.sizes) || len(dst) != s.sizes[i] {
		return &Error{InvalidArgument, fmt.Sprintf("shard: parameter %d with %d elements", i, len(dst))}
	}
	var p unsafe.Pointer
	var cerr *C.dk_error_t
	if err := check(C.dk_shard_full_param(s.ptr, C.int32_t(i), &p, &cerr), cerr); err != nil {
		return err
	}
	copyBack(dst, p)
	return nil
}

// AccumulateGrad adds parameter i's gradient.
func (s *Shard[T]) AccumulateGrad(i int, grad []T) error {
	defer runtime.KeepAlive(s)
	defer runtime.KeepAlive(grad)
	if err := s.live(); err != nil {
		return err
	}
	if err := int32Arg("shard_accumulate_grad", "parameter index", i); err != nil {
		return err
	}
	var ts tensors
	defer ts.free()
	var cerr *C.dk_error_t
	return check(C.dk_shard_accumulate_grad(s.ptr, C.int32_t(i), view(&ts, grad), &cerr), cerr)
}

// ReduceGrads is collective: every rank's gradients averaged into this
// rank's shard gradient.
func (s *Shard[T]) ReduceGrads() error {
	return s.call(func(p *C.dk_shard_t, e **C.dk_error_t) C.dk_status_t { return C.dk_shard_reduce_grads(p, e) })
}

// ReduceGradsStart is ReduceGrads in two halves: it starts the reduction
// and returns, so the caller computes meanwhile; ReduceGradsWait finishes it
// (the shard gradient is stale until then). Collective: every rank starts
// and waits for its units in the same order.
func (s *Shard[T]) ReduceGradsStart() error {
	return s.call(func(p *C.dk_shard_t, e **C.dk_error_t) C.dk_status_t { return C.dk_shard_reduce_grads_start(p, e) })
}

// ReduceGradsWait finishes ReduceGradsStart's reduction (a no-op when none
// is in flight).
func (s *Shard[T]) ReduceGradsWait() error {
	return s.call(func(p *C.dk_shard_t, e **C.dk_error_t) C.dk_status_t { return C.dk_shard_reduce_grads_wait(p, e) })
}

// SetRequireSync false is no_sync: ReduceGrads then keeps accumulating
// gradients locally until it is true again.
func (s *Shard[T]) SetRequireSync(requireSync bool) {
	defer runtime.KeepAlive(s)
	if s.ptr != nil {
		var flag C.int32_t
		if requireSync {
			flag = 1
		}
		C.dk_shard_set_require_sync(s.ptr, flag)
	}
}

// NumFlat is the number of flat buffers (one per parameter dtype); Local
// takes their indices.
func (s *Shard[T]) NumFlat() int {
	defer runtime.KeepAlive(s)
	if s.ptr == nil {
		return 0
	}
	return int(C.dk_shard_num_flat(s.ptr))
}

// HeldBytes is what the unit holds now (shards, gradients, full buffers).
func (s *Shard[T]) HeldBytes() int64 {
	defer runtime.KeepAlive(s)
	if s.ptr == nil {
		return 0
	}
	return int64(C.dk_shard_held_bytes(s.ptr))
}

// PeakHeldBytes is the most the unit held at once since NewShard.
func (s *Shard[T]) PeakHeldBytes() int64 {
	defer runtime.KeepAlive(s)
	if s.ptr == nil {
		return 0
	}
	return int64(C.dk_shard_peak_held_bytes(s.ptr))
}

// ShardEventKind says what happened to a unit (see TakeEvents).
type ShardEventKind int32

const (
	EventUnshardStart ShardEventKind = C.DK_SHARD_EVENT_UNSHARD_START // an all-gather was started
	EventUnshardDone  ShardEventKind = C.DK_SHARD_EVENT_UNSHARD_DONE  // ... and waited for
	EventReshard      ShardEventKind = C.DK_SHARD_EVENT_RESHARD       // the full parameters were freed
	EventReduceStart  ShardEventKind = C.DK_SHARD_EVENT_REDUCE_START  // a gradient reduction was started
	EventReduceDone   ShardEventKind = C.DK_SHARD_EVENT_REDUCE_DONE   // ... and added into the shard gradient
)

// ShardEvent is one entry of a unit's timeline.
type ShardEvent struct {
	Kind ShardEventKind
	At   time.Time
}

// TakeEvents returns the events recorded since the last call, oldest first
// (a unit keeps its newest 4096), so a trainer can see gathers overlap its
// compute.
func (s *Shard[T]) TakeEvents() ([]ShardEvent, error) {
	defer runtime.KeepAlive(s)
	if err := s.live(); err != nil {
		return nil, err
	}
	buf := make([]C.dk_shard_event_t, 4096)
	var n C.size_t
	var cerr *C.dk_error_t
	if err := check(C.dk_shard_take_events(s.ptr, &buf[0], C.size_t(len(buf)), &n, &cerr), cerr); err != nil {
		return nil, err
	}
	out := make([]ShardEvent, int(n))
	for i := range out {
		out[i] = ShardEvent{ShardEventKind(buf[i].kind), time.Unix(0, int64(buf[i].unix_ns))}
	}
	return out, nil
}

// Local is flat buffer k's shard: its values (the optimizer updates them in
// place) and its gradient. Both point into the library's memory and stay
// valid until Close (and only Close: the Shard may become unreachable while
// they are used).
func (s *Shard[T]) Local(k int) (values, grads []T, err error) {
	defer runtime.KeepAlive(s)
	if err := s.live(); err != nil {
		return nil, nil, err
	}
	if err := int32Arg("shard_local", "flat buffer index", k); err != nil {
		return nil, nil, err
	}
	var data, grad unsafe.Pointer
	var n C.int64_t
	var dtype C.dk_dtype_t
	var cerr *C.dk_error_t
	if err := check(C.dk_shard_local(s.ptr, C.int32_t(k), &data, &grad, &n, &dtype, &cerr), cerr); err != nil {
		return nil, nil, err
	}
	return unsafe.Slice((*T)(data), int(n)), unsafe.Slice((*T)(grad), int(n)), nil
}

// ZeroGrads zeroes the shard gradients.
func (s *Shard[T]) ZeroGrads() {
	defer runtime.KeepAlive(s)
	if s.ptr != nil {
		C.dk_shard_zero_grads(s.ptr)
	}
}

// LoadSharded is local: it loads a sharded checkpoint, or the shards a
// ShardedSnapshot fetched, saved by a group of savedWorldSize ranks:
// saved[flat*savedWorldSize+rank] is that rank's Local values of flat buffer
// flat (nil where this rank does not need it, as every shard but its own
// when the size is the same). It re-shards from any number of ranks; another
// unit's checkpoint is InvalidArgument.
func (s *Shard[T]) LoadSharded(savedWorldSize int, saved [][]T) error {
	defer runtime.KeepAlive(s)
	defer runtime.KeepAlive(saved)
	if err := s.live(); err != nil {
		return err
	}
	if err := int32Arg("shard_load_sharded", "saved world size", savedWorldSize); err != nil {
		return err
	}
	var ts tensors
	defer ts.free()
	cptrs := viewArray(&ts, saved)
	defer C.free(unsafe.Pointer(cptrs))
	var cerr *C.dk_error_t
	return s.group.issue("shard_load_sharded", func() error {
		return check(C.dk_shard_load_sharded(s.ptr, C.int32_t(savedWorldSize), cptrs, C.size_t(len(saved)), &cerr), cerr)
	})
}

// GatherFull is collective: every parameter's full values into outs.
func (s *Shard[T]) GatherFull(outs [][]T) error {
	defer runtime.KeepAlive(s)
	defer runtime.KeepAlive(outs)
	if err := s.live(); err != nil {
		return err
	}
	var ts tensors
	defer ts.free()
	cptrs := viewArray(&ts, outs)
	defer C.free(unsafe.Pointer(cptrs))
	var cerr *C.dk_error_t
	return s.group.issue("shard_gather_full", func() error { return check(C.dk_shard_gather_full(s.ptr, cptrs, C.size_t(len(outs)), 0, &cerr), cerr) })
}
