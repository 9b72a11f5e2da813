package distkit

/*
#include <stdlib.h>
#include "distkit/distkit.h"
*/
import "C"

import (
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// ReduceOp is a reduction (mmengine's names). Mean on integers truncates
// toward zero.
type ReduceOp int32

const (
	Sum     ReduceOp = C.DK_OP_SUM
	Product ReduceOp = C.DK_OP_PRODUCT
	Min     ReduceOp = C.DK_OP_MIN
	Max     ReduceOp = C.DK_OP_MAX
	BitAnd  ReduceOp = C.DK_OP_BAND
	BitOr   ReduceOp = C.DK_OP_BOR
	BitXor  ReduceOp = C.DK_OP_BXOR
	Mean    ReduceOp = C.DK_OP_MEAN
)

// Group is a process group. Every member calls its collectives in the same
// order. Close it when done; Abort may be called from any goroutine.
type Group struct {
	// mu guards closed and store, and the handle against Close while Abort
	// uses it. Only Close and Abort take it, and neither blocks while holding
	// it (destroy and abort return at once), so Abort never waits behind a
	// collective blocked on another goroutine.
	mu     sync.Mutex
	ptr    *C.dk_group_t
	closed bool
	store  *Store // kept open while the group lives (the ABI borrows it)
	// The issuer the group's collectives are made under (dk_issuer_set): a
	// goroutine moves between OS threads whenever it blocks, and the
	// library would take its next collective, issued from another thread
	// while the earlier ones are in flight, for another thread's. issuing
	// is 1 while a call makes collectives (issue).
	issuer  C.uint32_t
	issuing int32
}

// newGroup wraps a group handle the library made.
func newGroup(ptr *C.dk_group_t, store *Store) *Group {
	return &Group{ptr: ptr, store: store, issuer: C.dk_issuer_new()}
}

// issue makes one call that issues collectives on g: on one OS thread, as
// g's issuer, so that its collectives and the earlier ones of any goroutine
// are one issuer's. Such calls must not overlap (the library cannot tell two
// goroutines under one issuer apart, and their order would differ across
// ranks): an overlapping one is refused. Sends and receives need neither.
func (g *Group) issue(op string, call func() error) error {
	if !atomic.CompareAndSwapInt32(&g.issuing, 0, 1) {
		return &Error{FailedPrecondition, fmt.Sprintf(
			"distkit: %s on group '%s': issued while another goroutine's call on this group is "+
				"in progress; a group's collectives come from one goroutine at a time, in the "+
				"same order on every rank (use one group per goroutine)", op, g.Name())}
	}
	defer atomic.StoreInt32(&g.issuing, 0)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	previous := C.dk_issuer_set(g.issuer)
	defer C.dk_issuer_set(previous)
	return call()
}

// Rank is this process's rank in the group (-1 if it is not a member).
func (g *Group) Rank() int { return int(C.dk_group_rank(g.ptr)) }

// Size is the number of ranks in the group.
func (g *Group) Size() int { return int(C.dk_group_size(g.ptr)) }

// Backend is the group's backend ("gloo").
func (g *Group) Backend() string { return C.GoString(C.dk_group_backend(g.ptr)) }

// Name is the group's name ("world", "world/1", ...).
func (g *Group) Name() string { return C.GoString(C.dk_group_name(g.ptr)) }

// GlobalRank is the default group's rank of this group's rank groupRank
// (-1 when out of range): collectives take ranks of the group they run on.
func (g *Group) GlobalRank(groupRank int) int {
	// A rank no int32 holds is out of range: converted, it would wrap onto
	// another rank (1<<32 onto 0).
	if groupRank < math.MinInt32 || groupRank > math.MaxInt32 {
		return -1
	}
	return int(C.dk_group_global_rank(g.ptr, C.int32_t(groupRank)))
}

// Close releases the group. Later calls fail with FailedPrecondition (the ABI
// keeps a destroyed handle reserved, so this is never a use of freed memory).
func (g *Group) Close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.closed {
		C.dk_group_destroy(g.ptr)
		g.closed = true
		if g.store != nil {
			g.store.unacquire()
			g.store = nil
		}
	}
}

// Abort cancels in-flight work (it fails with Cancelled) and makes every later
// call fail. Any goroutine, also while another is blocked in a collective on
// g; after Close it does nothing.
func (g *Group) Abort() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.closed {
		C.dk_group_abort(g.ptr)
	}
}

// AsyncError is nil, or the error that made the group unusable.
func (g *Group) AsyncError() error {
	var cerr *C.dk_error_t
	return check(C.dk_group_async_error(g.ptr, &cerr), cerr)
}

// NewGroup is collective over g: a subgroup of the given ranks (ranks of g).
// Non-members get a group whose calls fail with FailedPrecondition.
func (g *Group) NewGroup(ranks []int) (*Group, error) {
	rs, err := cRanks("new_group", ranks)
	if err != nil {
		return nil, err
	}
	var out *C.dk_group_t
	var cerr *C.dk_error_t
	if err := g.issue("new_group", func() error { return check(C.dk_group_new(g.ptr, rs.ptr(), C.size_t(len(rs)), &out, &cerr), cerr) }); err != nil {
		return nil, err
	}
	return g.child(out), nil
}

// NewNamedGroup is collective over the members only: every rank in ranks
// (ranks of g) calls it with the same ranks and name (no '/', unique among
// g's named subgroups); the other ranks need not, and a rank not in ranks
// gets InvalidArgument. Every backend (MPI: MPI_Comm_create_group; NCCL: a
// new communicator among the members).
func (g *Group) NewNamedGroup(ranks []int, name string) (*Group, error) {
	rs, err := cRanks("new_named_group", ranks)
	if err != nil {
		return nil, err
	}
	n, err := cString("new_named_group: name", name)
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(n))
	var out *C.dk_group_t
	var cerr *C.dk_error_t
	if err := g.issue("new_named_group", func() error {
		return check(C.dk_group_new_named(g.ptr, rs.ptr(), C.size_t(len(rs)), n, &out, &cerr), cerr)
	}); err != nil {
		return nil, err
	}
	return g.child(out), nil
}

// GroupOptions configure NewGroupWithOptions (ABI 0.11): what a subgroup
// sets apart from its parent. The zero value makes the group NewGroup makes.
type GroupOptions struct {
	// Name "" makes the group collectively over the parent, as NewGroup;
	// else its members alone make it under this name, as NewNamedGroup (no
	// '/', unique among the parent's named subgroups).
	Name string
	// Timeout is the new group's per collective; zero or less: the parent's.
	Timeout time.Duration
	// ConnectTimeout bounds how long creating the group waits for its
	// members to connect (DeadlineExceeded naming the group after it);
	// zero or less: the new group's Timeout.
	ConnectTimeout time.Duration
}

// NewGroupWithOptions makes a subgroup of the given ranks (ranks of g) with
// options of its own (torch's new_group(ranks, timeout=...)): collective
// over g as NewGroup when opts.Name is empty, else over the members only as
// NewNamedGroup.
func (g *Group) NewGroupWithOptions(ranks []int, opts GroupOptions) (*Group, error) {
	rs, err := cRanks("new_group_with_options", ranks)
	if err != nil {
		return nil, err
	}
	var options C.dk_group_options_t
	C.dk_group_options_init_sized(&options, C.size_t(unsafe.Sizeof(options)))
	if opts.Name != "" {
		n, err := cString("new_group_with_options: name", opts.Name)
		if err != nil {
			return nil, err
		}
		defer C.free(unsafe.Pointer(n))
		options.name = n
	}
	options.timeout_ms = C.int64_t(positiveMillis(opts.Timeout))
	options.connect_timeout_ms = C.int64_t(positiveMillis(opts.ConnectTimeout))
	var out *C.dk_group_t
	var cerr *C.dk_error_t
	if err := g.issue("new_group_with_options", func() error {
		return check(C.dk_group_new_with_options(g.ptr, rs.ptr(), C.size_t(len(rs)), &options, &out, &cerr), cerr)
	}); err != nil {
		return nil, err
	}
	return g.child(out), nil
}

// positiveMillis is d in whole milliseconds for the ABI, where 0 (or less)
// often means "a default": 0 for zero or less, at least 1 for a positive d
// (one under a millisecond is no default). Every duration the package hands
// to a *_ms field or argument goes through it.
func positiveMillis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	if ms := d.Milliseconds(); ms >= 1 {
		return ms
	}
	return 1
}

// rankList is a list of ranks in the ABI's type.
type rankList []C.int32_t

func cRanks(op string, rs []int) (rankList, error) {
	out := make(rankList, len(rs))
	for i, r := range rs {
		if err := int32Arg(op, "rank", r); err != nil {
			return nil, err
		}
		out[i] = C.int32_t(r)
	}
	return out, nil
}

// int32Arg refuses a rank, root or tag the ABI's int32_t cannot hold (a
// conversion would silently wrap it to another, possibly valid, value).
func int32Arg(op, what string, v int) error {
	if v < math.MinInt32 || v > math.MaxInt32 {
		return &Error{InvalidArgument, fmt.Sprintf("%s: %s %d is out of range", op, what, v)}
	}
	return nil
}

func (rs rankList) ptr() *C.int32_t {
	if len(rs) == 0 {
		return nil
	}
	return &rs[0]
}

// child wraps a group made from g; it shares (and keeps alive) g's store.
func (g *Group) child(out *C.dk_group_t) *Group {
	sub := newGroup(out, nil)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.store != nil {
		g.store.retain()
		sub.store = g.store
	}
	return sub
}

// Shrink is recovery without restarting: every survivor of a failure calls
// it on the failed group. It waits up to settle for every member to report
// alive, agrees on the survivors through the store and returns a group of
// them (ranks renumbered in the old order) to go on at the smaller size.
// A negative settle means the library's default (5 s). Gloo groups only.
func (g *Group) Shrink(settle time.Duration) (*Group, error) {
	settleMs := int64(-1)
	if settle >= 0 {
		settleMs = positiveMillis(settle)
	}
	var out *C.dk_group_t
	var cerr *C.dk_error_t
	if err := check(C.dk_group_shrink(g.ptr, C.int64_t(settleMs), &out, &cerr), cerr); err != nil {
		return nil, err
	}
	return g.child(out), nil
}

// Grow is the way back to the job's size once a replacement process took a
// lost rank's place (distrun --max-replacements, ABI 0.7): every survivor
// calls it on the group it holds (the one Shrink returned, or the failed
// group itself), which is aborted first; close that group afterwards. The
// replacement does not call it: its Init sees DISTKIT_REPLACEMENT and joins
// this grow, and the world Init returns is the grown group. All get a group
// of worldSize ranks (0: the size Init joined with), world ranks in the
// original order, named "world@g<generation>", with connections of its own.
// Grow blocks up to timeout (0 or less: g's operation timeout); when a rank
// never comes every participant gets DeadlineExceeded naming it. Gloo and
// NCCL groups.
func (g *Group) Grow(worldSize int, timeout time.Duration) (*Group, error) {
	if worldSize < 0 || worldSize > math.MaxInt32 {
		return nil, &Error{InvalidArgument, fmt.Sprintf("grow: world size %d is not a size (0: the job's)", worldSize)}
	}
	timeoutMs := int64(-1)
	if timeout > 0 {
		// At least 1 ms: a positive timeout under a millisecond reached C as
		// 0, a deadline already past.
		timeoutMs = positiveMillis(timeout)
	}
	var out *C.dk_group_t
	var cerr *C.dk_error_t
	if err := check(C.dk_group_grow(g.ptr, C.int32_t(worldSize), C.int64_t(timeoutMs), &out, &cerr), cerr); err != nil {
		return nil, err
	}
	return g.child(out), nil
}

// GrowPending is local (ABI 0.8): whether a replacement that came after the
// survivors stopped waiting (and shrank) waits to join the next Grow of g's
// world. Ranks may see it at different moments: agree (e.g. an AllReduce of
// the maximum) before all call Grow.
func (g *Group) GrowPending() (bool, error) {
	var pending C.int32_t
	var cerr *C.dk_error_t
	if err := check(C.dk_group_grow_pending(g.ptr, &pending, &cerr), cerr); err != nil {
		return false, err
	}
	return pending != 0, nil
}

// collective is one collective's C call on group p; w is nil for a
// synchronous call, else it receives the Work.
type collective func(p *C.dk_group_t, w **C.dk_work_t, e **C.dk_error_t) C.dk_status_t

// run calls one collective: synchronously unless async, else it starts it
// and returns the Work that owns `ts` and keeps `keep` referenced.
func (g *Group) run(ts tensors, keep []any, async bool, f collective) (*Work, error) {
	var work *Work
	called := false
	err := g.issue("collective", func() error {
		called = true
		var err error
		work, err = g.runPlain(ts, keep, async, f)
		return err
	})
	if !called {
		ts.free() // refused before the call (runPlain frees them otherwise)
	}
	return work, err
}

// runPlain is run without issue (sends and receives).
func (g *Group) runPlain(ts tensors, keep []any, async bool, f collective) (*Work, error) {
	var cerr *C.dk_error_t
	if !async {
		err := check(f(g.ptr, nil, &cerr), cerr)
		runtime.KeepAlive(keep)
		ts.free()
		return nil, err
	}
	var w *C.dk_work_t
	if err := check(f(g.ptr, &w, &cerr), cerr); err != nil {
		ts.free()
		return nil, err
	}
	return newWork(w, ts, keep), nil
}

// call runs one collective synchronously.
func (g *Group) call(ts tensors, keep []any, f collective) error {
	_, err := g.run(ts, keep, false, f)
	return err
}

// The collectives that host slices and DeviceSlices share.

func allReduceOf(t *C.DLTensor, op ReduceOp) collective {
	return func(p *C.dk_group_t, w **C.dk_work_t, e **C.dk_error_t) C.dk_status_t {
		return C.dk_group_all_reduce(p, t, C.dk_reduce_op_t(op), w, e)
	}
}

func broadcastOf(t *C.DLTensor, root int) collective {
	return func(p *C.dk_group_t, w **C.dk_work_t, e **C.dk_error_t) C.dk_status_t {
		return C.dk_group_broadcast(p, t, C.int32_t(root), w, e)
	}
}

func allGatherOf(input, output *C.DLTensor) collective {
	return func(p *C.dk_group_t, w **C.dk_work_t, e **C.dk_error_t) C.dk_status_t {
		return C.dk_group_all_gather(p, input, output, w, e)
	}
}

func sizeError(op string, what string, got, want int) error {
	return &Error{InvalidArgument, fmt.Sprintf("%s: %s has %d elements, expected %d", op, what, got, want)}
}

// AllReduce reduces data across the group, in place.
func AllReduce[T Element](g *Group, data []T, op ReduceOp) error {
	_, err := allReduce(g, data, op, false)
	return err
}

// AllReduceAsync starts AllReduce; data must not be touched until the Work
// completes.
func AllReduceAsync[T Element](g *Group, data []T, op ReduceOp) (*Work, error) {
	return allReduce(g, data, op, true)
}

func allReduce[T Element](g *Group, data []T, op ReduceOp, async bool) (*Work, error) {
	var ts tensors
	t := view(&ts, data)
	return g.run(ts, []any{data}, async, allReduceOf(t, op))
}

// Broadcast copies root's data to every rank.
func Broadcast[T Element](g *Group, data []T, root int) error {
	_, err := broadcast(g, data, root, false)
	return err
}

// BroadcastAsync starts Broadcast.
func BroadcastAsync[T Element](g *Group, data []T, root int) (*Work, error) {
	return broadcast(g, data, root, true)
}

func broadcast[T Element](g *Group, data []T, root int, async bool) (*Work, error) {
	if err := int32Arg("broadcast", "root", root); err != nil {
		return nil, err
	}
	var ts tensors
	t := view(&ts, data)
	return g.run(ts, []any{data}, async, broadcastOf(t, root))
}

// Reduce leaves the reduction in data on root; elsewhere data is unchanged.
func Reduce[T Element](g *Group, data []T, op ReduceOp, root int) error {
	if err := int32Arg("reduce", "root", root); err != nil {
		return err
	}
	var ts tensors
	t := view(&ts, data)
	return g.call(ts, []any{data}, func(p *C.dk_group_t, w **C.dk_work_t, e **C.dk_error_t) C.dk_status_t {
		return C.dk_group_reduce(p, t, C.dk_reduce_op_t(op), C.int32_t(root), w, e)
	})
}

// AllGather fills output (Size() * len(input)) with every rank's input in
// rank order.
func AllGather[T Element](g *Group, input, output []T) error {
	_, err := allGather(g, input, output, false)
	return err
}

// AllGatherAsync starts AllGather.
func AllGatherAsync[T Element](g *Group, input, output []T) (*Work, error) {
	return allGather(g, input, output, true)
}

func allGather[T Element](g *Group, input, output []T, async bool) (*Work, error) {
	var ts tensors
	i, o := view(&ts, input), view(&ts, output)
	return g.run(ts, []any{input, output}, async, allGatherOf(i, o))
}

// Gather collects every rank's input into output (Size() * len(input)) on
// root; output is nil elsewhere.
func Gather[T Element](g *Group, input, output []T, root int) error {
	if err := int32Arg("gather", "root", root); err != nil {
		return err
	}
	var ts tensors
	i, o := view(&ts, input), view(&ts, output)
	return g.call(ts, []any{input, output}, func(p *C.dk_group_t, w **C.dk_work_t, e **C.dk_error_t) C.dk_status_t {
		return C.dk_group_gather(p, i, o, C.int32_t(root), w, e)
	})
}

// Scatter sends part r of root's input (Size() * len(output); nil elsewhere)
// to rank r's output.
func Scatter[T Element](g *Group, input, output []T, root int) error {
	if err := int32Arg("scatter", "root", root); err != nil {
		return err
	}
	var ts tensors
	i, o := view(&ts, input), view(&ts, output)
	return g.call(ts, []any{input, output}, func(p *C.dk_group_t, w **C.dk_work_t, e **C.dk_error_t) C.dk_status_t {
		return C.dk_group_scatter(p, i, o, C.int32_t(root), w, e)
	})
}

// ReduceScatter reduces input (Size() * len(output)) across ranks; rank r
// gets part r.
func ReduceScatter[T Element](g *Group, input, output []T, op ReduceOp) error {
	_, err := reduceScatter(g, input, output, op, false)
	return err
}

// ReduceScatterAsync starts ReduceScatter.
func ReduceScatterAsync[T Element](g *Group, input, output []T, op ReduceOp) (*Work, error) {
	return reduceScatter(g, input, output, op, true)
}

func reduceScatter[T Element](g *Group, input, output []T, op ReduceOp, async bool) (*Work, error) {
	var ts tensors
	i, o := view(&ts, input), view(&ts, output)
	return g.run(ts, []any{input, output}, async, func(p *C.dk_group_t, w **C.dk_work_t, e **C.dk_error_t) C.dk_status_t {
		return C.dk_group_reduce_scatter(p, i, o, C.dk_reduce_op_t(op), w, e)
	})
}

// AllToAll exchanges equal parts: rank r gets part r of every rank's input.
func AllToAll[T Element](g *Group, input, output []T) error {
	return AllToAllUneven(g, input, nil, output, nil)
}

// AllToAllUneven sends inputSplits[r] elements to rank r and receives
// outputSplits[r] from it (nil splits: equal parts).
func AllToAllUneven[T Element](g *Group, input []T, inputSplits []int64, output []T, outputSplits []int64) error {
	if len(inputSplits) != len(outputSplits) {
		return &Error{InvalidArgument, fmt.Sprintf("all_to_all: %d input splits but %d output splits", len(inputSplits), len(outputSplits))}
	}
	var ts tensors
	i, o := view(&ts, input), view(&ts, output)
	var is, os *C.int64_t
	if len(inputSplits) > 0 {
		is, os = (*C.int64_t)(&inputSplits[0]), (*C.int64_t)(&outputSplits[0])
	}
	return g.call(ts, []any{input, output, inputSplits, outputSplits}, func(p *C.dk_group_t, w **C.dk_work_t, e **C.dk_error_t) C.dk_status_t {
		return C.dk_group_all_to_all(p, i, is, o, os, C.size_t(len(inputSplits)), w, e)
	})
}

// Barrier waits until every rank reaches it.
func (g *Group) Barrier() error {
	return g.call(nil, nil, func(p *C.dk_group_t, w **C.dk_work_t, e **C.dk_error_t) C.dk_status_t {
		return C.dk_group_barrier(p, w, e)
	})
}

// BarrierAsync starts a barrier.
func (g *Group) BarrierAsync() (*Work, error) {
	return g.run(nil, nil, true, func(p *C.dk_group_t, w **C.dk_work_t, e **C.dk_error_t) C.dk_status_t {
		return C.dk_group_barrier(p, w, e)
	})
}

// Send sends data to dst (point to point: only the two ranks take part).
func Send[T Element](g *Group, data []T, dst, tag int) error {
	if err := int32Arg("send", "dst", dst); err != nil {
		return err
	}
	if err := int32Arg("send", "tag", tag); err != nil {
		return err
	}
	var ts tensors
	t := view(&ts, data)
	_, err := g.runPlain(ts, []any{data}, false, func(p *C.dk_group_t, w **C.dk_work_t, e **C.dk_error_t) C.dk_status_t {
		return C.dk_group_send(p, t, C.int32_t(dst), C.int32_t(tag), w, e)
	})
	return err
}

// Recv receives data from src.
func Recv[T Element](g *Group, data []T, src, tag int) error {
	if err := int32Arg("recv", "src", src); err != nil {
		return err
	}
	if err := int32Arg("recv", "tag", tag); err != nil {
		return err
	}
	var ts tensors
	t := view(&ts, data)
	_, err := g.runPlain(ts, []any{data}, false, func(p *C.dk_group_t, w **C.dk_work_t, e **C.dk_error_t) C.dk_status_t {
		return C.dk_group_recv(p, t, C.int32_t(src), C.int32_t(tag), w, e)
	})
	return err
}

// AllReduceCoalesced is mmengine's all_reduce_params: it reduces several
// buffers of one type in place, flattened into buckets of at most
// bucketSizeMB MiB (<= 0: one bucket) so that few collectives run.
func AllReduceCoalesced[T Element](g *Group, buffers [][]T, op ReduceOp, bucketSizeMB int64) error {
	var ts tensors
	defer ts.free()
	cptrs := viewArray(&ts, buffers)
	defer C.free(unsafe.Pointer(cptrs))
	var cerr *C.dk_error_t
	err := g.issue("all_reduce_coalesced", func() error {
		return check(C.dk_group_all_reduce_coalesced(g.ptr, cptrs, C.size_t(len(buffers)), C.dk_reduce_op_t(op), 1, C.int64_t(bucketSizeMB), &cerr), cerr)
	})
	runtime.KeepAlive(buffers)
	return err
}

// SyncRandomSeed returns rank 0's random seed on every rank.
func (g *Group) SyncRandomSeed() (int32, error) {
	var out C.int32_t
	var cerr *C.dk_error_t
	err := g.issue("sync_random_seed", func() error { return check(C.dk_group_sync_random_seed(g.ptr, &out, &cerr), cerr) })
	return int32(out), err
}

// AllGatherObject returns every rank's bytes (any length), in rank order.
func (g *Group) AllGatherObject(data []byte) ([][]byte, error) {
	d := cBytes(data)
	defer C.free(d)
	var list *C.dk_bytes_t
	var count C.size_t
	var cerr *C.dk_error_t
	if err := g.issue("all_gather_object", func() error {
		return check(C.dk_group_all_gather_object(g.ptr, d, C.size_t(len(data)), &list, &count, &cerr), cerr)
	}); err != nil {
		return nil, err
	}
	return takeList(list, count), nil
}

// GatherObject returns every rank's bytes on dst, nil elsewhere.
func (g *Group) GatherObject(data []byte, dst int) ([][]byte, error) {
	if err := int32Arg("gather_object", "dst", dst); err != nil {
		return nil, err
	}
	d := cBytes(data)
	defer C.free(d)
	var list *C.dk_bytes_t
	var count C.size_t
	var cerr *C.dk_error_t
	if err := g.issue("gather_object", func() error {
		return check(C.dk_group_gather_object(g.ptr, d, C.size_t(len(data)), C.int32_t(dst), &list, &count, &cerr), cerr)
	}); err != nil {
		return nil, err
	}
	return takeList(list, count), nil
}

// BroadcastObjectList returns src's list on every rank (items is read on src
// only).
func (g *Group) BroadcastObjectList(items [][]byte, src int) ([][]byte, error) {
	if err := int32Arg("broadcast_object_list", "src", src); err != nil {
		return nil, err
	}
	l := newByteList(items)
	defer l.free()
	var list *C.dk_bytes_t
	var count C.size_t
	var cerr *C.dk_error_t
	if err := g.issue("broadcast_object_list", func() error {
		return check(C.dk_group_broadcast_object_list(g.ptr, l.ptr(), C.size_t(len(l.items)), C.int32_t(src), &list, &count, &cerr), cerr)
	}); err != nil {
		return nil, err
	}
	out := takeList(list, count)
	if out == nil {
		out = [][]byte{}
	}
	return out, nil
}
