package distkit

/*
#include "distkit/distkit.h"
*/
import "C"

import (
	"runtime"
	"sync"
	"time"
)

// Work is an operation in flight. It keeps the buffers it was given
// referenced until it completes. Close it when done; Close waits for the
// operation first, so a buffer is never released while the library still
// uses it. A Work dropped unfinished is closed by a goroutine of its own once
// the operation ends (the finalizer never blocks, so it cannot hold up the
// program's other finalizers).
type Work struct {
	mu      sync.Mutex
	ptr     *C.dk_work_t
	tensors tensors
	keep    []any
}

func newWork(p *C.dk_work_t, ts tensors, keep []any) *Work {
	w := &Work{ptr: p, tensors: ts, keep: keep}
	runtime.SetFinalizer(w, (*Work).finalize)
	return w
}

// finalize runs on Go's single finalizer goroutine, which must not block: a
// finished operation is released at once; an unfinished one is waited for on
// a goroutine of its own (which keeps w, and so its buffers, referenced).
func (w *Work) finalize() {
	var state C.dk_work_state_t
	if w.ptr == nil || (C.dk_work_test(w.ptr, &state, nil) == C.DK_OK && state != C.DK_WORK_PENDING) {
		w.Close()
		return
	}
	go w.Close()
}

// Test reports whether the operation finished: (true, nil) when it succeeded,
// (false, nil) while it runs, its error if it failed.
func (w *Work) Test() (bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ptr == nil {
		return false, &Error{FailedPrecondition, "distkit: the work is closed"}
	}
	var state C.dk_work_state_t
	var cerr *C.dk_error_t
	if err := check(C.dk_work_test(w.ptr, &state, &cerr), cerr); err != nil {
		return false, err
	}
	if state == C.DK_WORK_FAILED {
		// dk_work_test reports only the state; the header's way to get the
		// failed operation's error is dk_work_wait(work, 0, err).
		if err := check(C.dk_work_wait(w.ptr, 0, &cerr), cerr); err != nil {
			return false, err
		}
		return false, &Error{Internal, "distkit: the operation failed"}
	}
	return state == C.DK_WORK_SUCCEEDED, nil
}

// Wait blocks until the operation finishes (timeout <= 0: no limit) and
// returns its status; DeadlineExceeded if it is still running at the timeout.
func (w *Work) Wait(timeout time.Duration) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ptr == nil {
		return &Error{FailedPrecondition, "distkit: the work is closed"}
	}
	t := C.int64_t(-1)
	if timeout > 0 {
		t = C.int64_t(positiveMillis(timeout))
	}
	var cerr *C.dk_error_t
	return check(C.dk_work_wait(w.ptr, t, &cerr), cerr)
}

// Close waits for the operation if it is still running, then frees the handle
// and releases the buffers.
func (w *Work) Close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ptr != nil {
		C.dk_work_wait(w.ptr, -1, nil)
		C.dk_work_destroy(w.ptr)
		w.ptr = nil
		w.tensors.free()
		w.tensors, w.keep = nil, nil
	}
	runtime.SetFinalizer(w, nil)
}
