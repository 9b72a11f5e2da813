// Package distkit is the Go binding of distkit: join a distributed job (the
// same job as C, C++, Python and Rust ranks) and run collectives on slices.
//
// It calls the C ABI through cgo, including distkit.h itself, so a binding
// that disagrees with the header fails to compile. Build against
// libdistkit.so (see README.md):
//
//	CGO_LDFLAGS="-L$PWD/bazel-bin/capi" LD_LIBRARY_PATH=$PWD/bazel-bin/capi go test ./...
//
// Errors are copied out of the library and freed inside the call that got
// them (goroutines move between threads; the ABI has no thread-local error).
// Buffers lent to asynchronous work stay referenced by the Work until it
// completes; Go's collector does not move heap memory.
package distkit

/*
#cgo CFLAGS: -I${SRCDIR}/../../capi/include -std=c11
#cgo LDFLAGS: -ldistkit
#include <stdlib.h>
#include "distkit/distkit.h"

*/
import "C"

import (
	"fmt"
	"os/signal"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// Code is a status code of the ABI (google.rpc numbering).
type Code int32

const (
	OK                 Code = C.DK_OK
	Cancelled          Code = C.DK_CANCELLED
	Unknown            Code = C.DK_UNKNOWN
	InvalidArgument    Code = C.DK_INVALID_ARGUMENT
	DeadlineExceeded   Code = C.DK_DEADLINE_EXCEEDED
	NotFound           Code = C.DK_NOT_FOUND
	AlreadyExists      Code = C.DK_ALREADY_EXISTS
	PermissionDenied   Code = C.DK_PERMISSION_DENIED
	ResourceExhausted  Code = C.DK_RESOURCE_EXHAUSTED
	FailedPrecondition Code = C.DK_FAILED_PRECONDITION
	Aborted            Code = C.DK_ABORTED
	OutOfRange         Code = C.DK_OUT_OF_RANGE
	Unimplemented      Code = C.DK_UNIMPLEMENTED
	Internal           Code = C.DK_INTERNAL
	Unavailable        Code = C.DK_UNAVAILABLE
	DataLoss           Code = C.DK_DATA_LOSS
	Unauthenticated    Code = C.DK_UNAUTHENTICATED
)

var codeNames = map[Code]string{
	OK: "OK", Cancelled: "CANCELLED", Unknown: "UNKNOWN", InvalidArgument: "INVALID_ARGUMENT",
	DeadlineExceeded: "DEADLINE_EXCEEDED", NotFound: "NOT_FOUND", AlreadyExists: "ALREADY_EXISTS",
	PermissionDenied: "PERMISSION_DENIED", ResourceExhausted: "RESOURCE_EXHAUSTED",
	FailedPrecondition: "FAILED_PRECONDITION", Aborted: "ABORTED", OutOfRange: "OUT_OF_RANGE",
	Unimplemented: "UNIMPLEMENTED", Internal: "INTERNAL", Unavailable: "UNAVAILABLE",
	DataLoss: "DATA_LOSS", Unauthenticated: "UNAUTHENTICATED",
}

func (c Code) String() string {
	if s, ok := codeNames[c]; ok {
		return s
	}
	return fmt.Sprintf("CODE(%d)", int32(c))
}

// Error is a failed call: its code (read from the ABI) and the library's
// message, which names the operation, group and rank involved.
type Error struct {
	Code    Code
	Message string
}

func (e *Error) Error() string { return e.Code.String() + ": " + e.Message }

// CodeOf returns err's code: OK for nil, Unknown for errors not from distkit.
func CodeOf(err error) Code {
	if err == nil {
		return OK
	}
	if e, ok := err.(*Error); ok {
		return e.Code
	}
	return Unknown
}

// check turns a status and its error object into a Go error, copying the
// message and freeing the object.
func check(status C.dk_status_t, cerr *C.dk_error_t) error {
	if status == C.DK_OK {
		return nil
	}
	if cerr == nil {
		return &Error{Code(status), fmt.Sprintf("distkit call failed with status %d", int32(status))}
	}
	e := &Error{Code(C.dk_error_code(cerr)), C.GoString(C.dk_error_message(cerr))}
	C.dk_error_free(cerr)
	return e
}

// Gloo's TCP threads are not Go threads. A write there to a peer that has
// died raises SIGPIPE, and the Go runtime answers a SIGPIPE on a non-Go
// thread by killing the process unless SIGPIPE is ignored or notified
// (os/signal: "Go programs that use cgo or SWIG"). Ignored, the write fails
// with EPIPE and the collective with UNAVAILABLE, as in C, C++, Python and
// Rust programs (the library ignores SIGPIPE there unless a handler is set).
func init() { signal.Ignore(syscall.SIGPIPE) }

// The ABI version of the header this package is built with.
const (
	headerMajor = C.DK_ABI_MAJOR
	headerMinor = C.DK_ABI_MINOR
)

var (
	versionOnce sync.Once
	versionErr  error
)

// CheckVersion checks once that the loaded library serves this header.
func CheckVersion() error {
	versionOnce.Do(func() {
		var cerr *C.dk_error_t
		versionErr = check(C.dk_init_version(headerMajor, headerMinor, &cerr), cerr)
	})
	return versionErr
}

// LibraryVersion is the ABI version of the loaded library, which may be
// newer than the header this package was built with (CheckVersion accepts
// that).
func LibraryVersion() (major, minor int) {
	var ma, mi C.int32_t
	C.dk_get_version(&ma, &mi)
	return int(ma), int(mi)
}

// InitOptions configure Init and InitWithStore. The zero value means the
// defaults ("gloo", 30 minutes per collective).
type InitOptions struct {
	Backend string
	Timeout time.Duration
	// ConnectTimeout bounds how long init waits for the job's ranks to join
	// and connect; zero means Timeout. A job may start slowly and still fail
	// its collectives fast.
	ConnectTimeout time.Duration
}

func initConfig(o InitOptions) (C.dk_init_config_t, func(), error) {
	var config C.dk_init_config_t
	C.dk_init_config_init_sized(&config, C.size_t(unsafe.Sizeof(config)))
	free := func() {}
	if o.Backend != "" {
		b, err := cString("backend", o.Backend)
		if err != nil {
			return config, free, err
		}
		config.backend = b
		free = func() { C.free(unsafe.Pointer(b)) }
	}
	if o.Timeout > 0 {
		config.timeout_ms = C.int64_t(positiveMillis(o.Timeout))
	}
	if o.ConnectTimeout > 0 {
		config.connect_timeout_ms = C.int64_t(positiveMillis(o.ConnectTimeout))
	}
	return config, free, nil
}

// Init joins the job the launcher's environment describes ("pytorch" for
// torchrun and distrun, "slurm", "mpi", "distrun"). Collective: every rank
// calls it. The world group is also the default group until Shutdown. In a
// process started in place of a lost rank (DISTKIT_REPLACEMENT=<n>, set by
// distrun --max-replacements) it joins the survivors' Group.Grow instead of
// the world's rendezvous, and the world it returns is the grown group.
func Init(launcher string, o InitOptions) (*Group, error) {
	if err := CheckVersion(); err != nil {
		return nil, err
	}
	config, free, err := initConfig(o)
	defer free()
	if err != nil {
		return nil, err
	}
	l, err := cString("launcher", launcher)
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(l))
	var world *C.dk_group_t
	var cerr *C.dk_error_t
	if err := check(C.dk_init(l, &config, &world, &cerr), cerr); err != nil {
		return nil, err
	}
	return newGroup(world, nil), nil
}

// InitWithStore joins a job of `size` ranks as `rank`, through `store`, which
// the group keeps referenced.
func InitWithStore(store *Store, rank, size int, o InitOptions) (*Group, error) {
	if err := CheckVersion(); err != nil {
		return nil, err
	}
	if err := int32Arg("init_with_store", "rank", rank); err != nil {
		return nil, err
	}
	if err := int32Arg("init_with_store", "size", size); err != nil {
		return nil, err
	}
	config, free, err := initConfig(o)
	defer free()
	if err != nil {
		return nil, err
	}
	// The group keeps the handle acquired until it is closed.
	sp, err := store.acquire()
	if err != nil {
		return nil, err
	}
	var world *C.dk_group_t
	var cerr *C.dk_error_t
	if err := check(C.dk_init_with_store(sp, C.int32_t(rank), C.int32_t(size), &config, &world, &cerr), cerr); err != nil {
		store.unacquire()
		return nil, err
	}
	return newGroup(world, store), nil
}

// Shutdown forgets the default group (groups stay valid until closed).
func Shutdown() { C.dk_shutdown() }

// IsDistributed reports whether Init succeeded (and Shutdown was not called).
func IsDistributed() bool { return C.dk_is_distributed() != 0 }
