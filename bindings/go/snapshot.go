package distkit

/*
#include <stdlib.h>
#include "distkit/distkit.h"
*/
import "C"

import (
	"runtime"
	"unsafe"
)

// Snapshot is a trainer's state kept in memory, for recovery without a
// checkpoint file (dk_snapshot_*, ABI 0.8). Register the buffers once
// (RegisterBuffer), Commit at points where every rank is at the same step;
// after Group.Shrink or Group.Grow every member of the new group (a
// replacement too, on the world Init returned) calls Sync, which loads the
// newest commit any member holds into every rank's buffers.
//
// The library keeps its copy in C memory this type owns (cgo lets no C code
// hold Go memory): Commit copies the registered slices there, Sync and
// Restore copy back into them. The slices' elements are what is registered:
// write into them in place, never replace them. One goroutine at a time;
// Close it.
type Snapshot struct {
	ptr     *C.dk_snapshot_t
	buffers stagedBuffers
}

type snapshotBuffer struct {
	staging unsafe.Pointer // C memory, registered with the library
	save    func()         // the Go slice into staging
	load    func()         // staging into the Go slice
}

// stagedBuffers are a snapshot's (Snapshot's or ShardedSnapshot's)
// registered slices with their C copies.
type stagedBuffers []snapshotBuffer

// save gives the library's copies the slices' present values (before a
// commit; before a load too, so that after it the slices hold exactly what
// the library loaded).
func (bs stagedBuffers) save() {
	for _, b := range bs {
		b.save()
	}
}

// load copies the library's copies into the slices.
func (bs stagedBuffers) load() {
	for _, b := range bs {
		b.load()
	}
}

// free frees the C copies once the library's snapshot is destroyed.
func (bs *stagedBuffers) free() {
	for _, b := range *bs {
		C.free(b.staging)
	}
	*bs = nil
}

// snapshotQuery is query's answer for a snapshot's handle p, -1 once it is
// closed (p nil); owner, which frees p when finalized, stays alive for the
// call.
func snapshotQuery[P any](p *P, owner any, query func(*P) C.int64_t) int64 {
	if p == nil {
		return -1
	}
	n := int64(query(p))
	runtime.KeepAlive(owner)
	return n
}

// NewSnapshot is an empty snapshot: no buffers, nothing committed.
func NewSnapshot() (*Snapshot, error) {
	if err := CheckVersion(); err != nil {
		return nil, err
	}
	s := &Snapshot{}
	var cerr *C.dk_error_t
	if err := check(C.dk_snapshot_create(&s.ptr, &cerr), cerr); err != nil {
		return nil, err
	}
	runtime.SetFinalizer(s, (*Snapshot).Close)
	return s, nil
}

// RegisterBuffer adds data (its elements, by reference) to s under name.
// Every rank registers the same names and sizes in the same order; all
// before the first Commit or Sync (FailedPrecondition afterwards).
func RegisterBuffer[T Element](s *Snapshot, name string, data []T) error {
	if err := s.live(); err != nil {
		return err
	}
	defer runtime.KeepAlive(s)
	return stageBuffer(&s.buffers, name, data, func(cname *C.char, staging unsafe.Pointer, bytes C.size_t, cerr **C.dk_error_t) C.dk_status_t {
		return C.dk_snapshot_register(s.ptr, cname, staging, bytes, cerr)
	})
}

// stageBuffer copies data into C memory, registers that copy with the
// library through register (a snapshot's register call) and adds the pair
// to bs.
func stageBuffer[T Element](bs *stagedBuffers, name string, data []T, register func(*C.char, unsafe.Pointer, C.size_t, **C.dk_error_t) C.dk_status_t) error {
	cname, err := cString("snapshot buffer name", name)
	if err != nil {
		return err
	}
	defer C.free(unsafe.Pointer(cname))
	var z T
	bytes := len(data) * int(unsafe.Sizeof(z))
	staging := C.malloc(C.size_t(bytes) + 1)
	view := unsafe.Slice((*T)(staging), len(data))
	copy(view, data)
	var cerr *C.dk_error_t
	if err := check(register(cname, staging, C.size_t(bytes), &cerr), cerr); err != nil {
		C.free(staging)
		return err
	}
	load := func() { copy(data, view) }
	if flags, ok := any(data).([]bool); ok {
		// The bytes may come from another language's rank (C's 2 is
		// true): a byte Go's bool cannot hold is read as its truth value.
		load = func() { loadBools(flags, unsafe.Slice((*byte)(staging), len(flags))) }
	}
	*bs = append(*bs, snapshotBuffer{
		staging: staging,
		save:    func() { copy(view, data) },
		load:    load,
	})
	return nil
}

// loadBools sets each flag to whether its byte is non-zero, so that a flag
// is exactly true or false whatever byte a peer sent.
func loadBools(flags []bool, bytes []byte) {
	for i, b := range bytes {
		flags[i] = b != 0
	}
}

func (s *Snapshot) live() error {
	if s.ptr == nil {
		return &Error{FailedPrecondition, "snapshot: closed"}
	}
	return nil
}

// Commit copies the registered slices into a new snapshot, which replaces
// the one held once complete; its number is the held one's + 1.
func (s *Snapshot) Commit() error {
	if err := s.live(); err != nil {
		return err
	}
	s.buffers.save()
	var cerr *C.dk_error_t
	err := check(C.dk_snapshot_commit(s.ptr, &cerr), cerr)
	runtime.KeepAlive(s) // its finalizer must not free the snapshot mid-call
	return err
}

// Sync is collective over g, after it changed: it loads the newest commit any
// member holds into every member's registered slices and returns its number.
// InvalidArgument on every member when registrations differ (naming the
// buffer and the ranks), FailedPrecondition when no member holds a snapshot.
// On an error the slices are left as they were.
func (s *Snapshot) Sync(g *Group) (int64, error) {
	var commit C.int64_t
	// Collective over g: issued as g's calls are (Group.issue).
	err := g.issue("snapshot_sync", func() error {
		return s.load(func(p *C.dk_snapshot_t, e **C.dk_error_t) C.dk_status_t {
			return C.dk_snapshot_sync(p, g.ptr, &commit, e)
		})
	})
	runtime.KeepAlive(g)
	if err != nil {
		return 0, err
	}
	return int64(commit), nil
}

// Restore copies the snapshot held back into the registered slices
// (FailedPrecondition when none is held).
func (s *Snapshot) Restore() error {
	return s.load(func(p *C.dk_snapshot_t, e **C.dk_error_t) C.dk_status_t { return C.dk_snapshot_restore(p, e) })
}

// load makes a call that loads a commit into the library's copy, the slices
// staged first (so that after it they hold exactly what was loaded), and
// copies it into the slices; on an error they are left as they were.
func (s *Snapshot) load(call func(p *C.dk_snapshot_t, e **C.dk_error_t) C.dk_status_t) error {
	if err := s.live(); err != nil {
		return err
	}
	s.buffers.save()
	var cerr *C.dk_error_t
	err := check(call(s.ptr, &cerr), cerr)
	runtime.KeepAlive(s) // its finalizer must not free the snapshot mid-call
	if err != nil {
		return err
	}
	s.buffers.load()
	return nil
}

// CommitNumber is the number of the snapshot held (1 for the first commit;
// after a Sync, the commit loaded); 0 when none is.
func (s *Snapshot) CommitNumber() int64 {
	return snapshotQuery(s.ptr, s, func(p *C.dk_snapshot_t) C.int64_t { return C.dk_snapshot_commit_number(p) })
}

// Bytes is the memory the library's snapshot takes (0 when none is held;
// this binding's staging copy adds as much again).
func (s *Snapshot) Bytes() int64 {
	return snapshotQuery(s.ptr, s, func(p *C.dk_snapshot_t) C.int64_t { return C.dk_snapshot_bytes(p) })
}

// Close frees the snapshot and its copies; the registered slices stay.
func (s *Snapshot) Close() {
	if s.ptr != nil {
		C.dk_snapshot_destroy(s.ptr)
		s.ptr = nil
		s.buffers.free()
	}
}
