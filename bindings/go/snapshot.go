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
	buffers []snapshotBuffer
}

type snapshotBuffer struct {
	staging unsafe.Pointer // C memory, registered with the library
	save    func()         // the Go slice into staging
	load    func()         // staging into the Go slice
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
	b, err := stageBuffer(name, data, func(cname *C.char, staging unsafe.Pointer, bytes C.size_t, cerr **C.dk_error_t) C.dk_status_t {
		return C.dk_snapshot_register(s.ptr, cname, staging, bytes, cerr)
	})
	runtime.KeepAlive(s)
	if err != nil {
		return err
	}
	s.buffers = append(s.buffers, b)
	return nil
}

// stageBuffer copies data into C memory and registers that copy with the
// library through register (a snapshot's register call); the buffer it
// returns copies between the two.
func stageBuffer[T Element](name string, data []T, register func(*C.char, unsafe.Pointer, C.size_t, **C.dk_error_t) C.dk_status_t) (snapshotBuffer, error) {
	var z T
	bytes := len(data) * int(unsafe.Sizeof(z))
	staging := C.malloc(C.size_t(bytes) + 1)
	view := unsafe.Slice((*T)(staging), len(data))
	copy(view, data)
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var cerr *C.dk_error_t
	if err := check(register(cname, staging, C.size_t(bytes), &cerr), cerr); err != nil {
		C.free(staging)
		return snapshotBuffer{}, err
	}
	return snapshotBuffer{
		staging: staging,
		save:    func() { copy(view, data) },
		load:    func() { copy(data, view) },
	}, nil
}

func (s *Snapshot) live() error {
	if s.ptr == nil {
		return &Error{FailedPrecondition, "snapshot: closed"}
	}
	return nil
}

// stage gives the library's copy the slices' present values, so that after a
// Sync or Restore they hold exactly what the library loaded.
func (s *Snapshot) stage() {
	for _, b := range s.buffers {
		b.save()
	}
}

// Commit copies the registered slices into a new snapshot, which replaces
// the one held once complete; its number is the held one's + 1.
func (s *Snapshot) Commit() error {
	if err := s.live(); err != nil {
		return err
	}
	s.stage()
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
	if err := s.live(); err != nil {
		return 0, err
	}
	s.stage()
	var commit C.int64_t
	var cerr *C.dk_error_t
	err := check(C.dk_snapshot_sync(s.ptr, g.ptr, &commit, &cerr), cerr)
	runtime.KeepAlive(s)
	runtime.KeepAlive(g)
	if err != nil {
		return 0, err
	}
	for _, b := range s.buffers {
		b.load()
	}
	return int64(commit), nil
}

// Restore copies the snapshot held back into the registered slices
// (FailedPrecondition when none is held).
func (s *Snapshot) Restore() error {
	if err := s.live(); err != nil {
		return err
	}
	s.stage()
	var cerr *C.dk_error_t
	err := check(C.dk_snapshot_restore(s.ptr, &cerr), cerr)
	runtime.KeepAlive(s)
	if err != nil {
		return err
	}
	for _, b := range s.buffers {
		b.load()
	}
	return nil
}

// CommitNumber is the number of the snapshot held (1 for the first commit;
// after a Sync, the commit loaded); 0 when none is.
func (s *Snapshot) CommitNumber() int64 {
	if s.ptr == nil {
		return -1
	}
	n := int64(C.dk_snapshot_commit_number(s.ptr))
	runtime.KeepAlive(s)
	return n
}

// Bytes is the memory the library's snapshot takes (0 when none is held;
// this binding's staging copy adds as much again).
func (s *Snapshot) Bytes() int64 {
	if s.ptr == nil {
		return -1
	}
	n := int64(C.dk_snapshot_bytes(s.ptr))
	runtime.KeepAlive(s)
	return n
}

// Close frees the snapshot and its copies; the registered slices stay.
func (s *Snapshot) Close() {
	if s.ptr != nil {
		C.dk_snapshot_destroy(s.ptr)
		s.ptr = nil
		for _, b := range s.buffers {
			C.free(b.staging)
		}
		s.buffers = nil
	}
}
