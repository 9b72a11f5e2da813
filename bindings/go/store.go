package distkit

/*
#include <stdlib.h>
#include "distkit/distkit.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"sync"
	"time"
	"unsafe"
)

// Store is a connection to a job's key-value store. Safe for concurrent use
// (the header marks every store call "any thread"), Close included: calls
// already in flight finish on the open handle, later ones fail with
// FailedPrecondition.
type Store struct {
	mu     sync.Mutex // guards the fields below
	ptr    *C.dk_store_t
	closed bool // Close was called
	// users: calls in flight and groups made with InitWithStore that are
	// still open; the handle is destroyed when it is closed and none is left.
	users int
}

// StoreOptions configure Connect and Serve; zero fields take the defaults
// (no token, 300 s timeouts).
type StoreOptions struct {
	Token          string
	Timeout        time.Duration
	ConnectTimeout time.Duration
}

func openStore(address string, o StoreOptions, serve bool) (*Store, error) {
	if err := CheckVersion(); err != nil {
		return nil, err
	}
	var config C.dk_store_config_t
	C.dk_store_config_init_sized(&config, C.size_t(unsafe.Sizeof(config)))
	a, err := cString("store address", address)
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(a))
	config.address = a
	if o.Token != "" {
		t, err := cString("store token", o.Token)
		if err != nil {
			return nil, err
		}
		defer C.free(unsafe.Pointer(t))
		config.token = t
	}
	if o.Timeout > 0 {
		config.timeout_ms = C.int64_t(positiveMillis(o.Timeout))
	}
	if o.ConnectTimeout > 0 {
		config.connect_timeout_ms = C.int64_t(positiveMillis(o.ConnectTimeout))
	}
	var out *C.dk_store_t
	var cerr *C.dk_error_t
	var status C.dk_status_t
	if serve {
		status = C.dk_store_serve(&config, &out, &cerr)
	} else {
		status = C.dk_store_connect(&config, &out, &cerr)
	}
	if err := check(status, cerr); err != nil {
		return nil, err
	}
	s := &Store{ptr: out}
	runtime.SetFinalizer(s, (*Store).Close)
	return s, nil
}

// Connect connects to the store at "host:port".
func Connect(address string, o StoreOptions) (*Store, error) { return openStore(address, o, false) }

// Serve starts a store server in this process ("127.0.0.1:0" picks a port).
func Serve(address string, o StoreOptions) (*Store, error) { return openStore(address, o, true) }

// DefaultStore is a new connection to the job's store (the one Init or
// InitWithStore joined through), so other components can rendezvous in it;
// FailedPrecondition when not distributed. Closing it closes this connection
// only.
func DefaultStore() (*Store, error) {
	if err := CheckVersion(); err != nil {
		return nil, err
	}
	var out *C.dk_store_t
	var cerr *C.dk_error_t
	if err := check(C.dk_default_store(&out, &cerr), cerr); err != nil {
		return nil, err
	}
	s := &Store{ptr: out}
	runtime.SetFinalizer(s, (*Store).Close)
	return s, nil
}

// Close closes the connection (and the server Serve started). Groups made
// with InitWithStore keep the store open until they are closed: the ABI
// borrows it for their lifetime; so do calls in flight (a blocking Get on
// another goroutine) until they return. Close itself does not wait.
func (s *Store) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.release()
	runtime.SetFinalizer(s, nil)
}

// release destroys the handle once it is closed and unused; s.mu is held.
func (s *Store) release() {
	if s.closed && s.users == 0 && s.ptr != nil {
		C.dk_store_destroy(s.ptr)
		s.ptr = nil
	}
}

// acquire is how every use of the handle starts: FailedPrecondition once
// the store is closed, else the handle, which stays valid until the matching
// unacquire (a call's end, or the group's Close).
func (s *Store) acquire() (*C.dk_store_t, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, &Error{FailedPrecondition, "distkit: the store is closed"}
	}
	s.users++
	return s.ptr, nil
}

// retain adds a user to a store a group already holds: a child group made
// from it keeps it too, even when Close was called (the handle lives on).
func (s *Store) retain() {
	s.mu.Lock()
	s.users++
	s.mu.Unlock()
}

func (s *Store) unacquire() {
	s.mu.Lock()
	s.users--
	s.release()
	s.mu.Unlock()
}

// Address is "host:port" of the store.
func (s *Store) Address() string {
	// Here and in every method: no finalizer closes the store while the
	// library works on it (a blocking call may sit inside C for long).
	defer runtime.KeepAlive(s)
	// As before Close, also while groups keep a closed store open.
	s.mu.Lock()
	p := s.ptr
	if p == nil {
		s.mu.Unlock()
		return ""
	}
	s.users++
	s.mu.Unlock()
	defer s.unacquire()
	return C.GoString(C.dk_store_address(p))
}

// withKey calls f with key as a C string and checks its status and the
// error f's call left in *cerr.
func withKey(key string, cerr **C.dk_error_t, f func(*C.char) C.dk_status_t) error {
	k, err := cString("store key", key)
	if err != nil {
		return err
	}
	defer C.free(unsafe.Pointer(k))
	status := f(k)
	return check(status, *cerr)
}

// Set stores value under key.
func (s *Store) Set(key string, value []byte) error {
	defer runtime.KeepAlive(s)
	p, err := s.acquire()
	if err != nil {
		return err
	}
	defer s.unacquire()
	var cerr *C.dk_error_t
	v := cBytes(value)
	defer C.free(v)
	return withKey(key, &cerr, func(k *C.char) C.dk_status_t {
		return C.dk_store_set(p, k, v, C.size_t(len(value)), &cerr)
	})
}

// Get blocks until key exists (or the store's timeout passes).
func (s *Store) Get(key string) ([]byte, error) {
	defer runtime.KeepAlive(s)
	p, err := s.acquire()
	if err != nil {
		return nil, err
	}
	defer s.unacquire()
	var cerr *C.dk_error_t
	var data unsafe.Pointer
	var size C.size_t
	if err := withKey(key, &cerr, func(k *C.char) C.dk_status_t {
		return C.dk_store_get(p, k, &data, &size, &cerr)
	}); err != nil {
		return nil, err
	}
	return goBytes(data, size), nil
}

// Add adds delta to the integer at key and returns the new value.
func (s *Store) Add(key string, delta int64) (int64, error) {
	defer runtime.KeepAlive(s)
	p, err := s.acquire()
	if err != nil {
		return 0, err
	}
	defer s.unacquire()
	var cerr *C.dk_error_t
	var out C.int64_t
	err = withKey(key, &cerr, func(k *C.char) C.dk_status_t {
		return C.dk_store_add(p, k, C.int64_t(delta), &out, &cerr)
	})
	return int64(out), err
}

// cStrings is a C array of C strings.
type cStrings []*C.char

func newCStrings(what string, ss []string) (cStrings, error) {
	out := make(cStrings, 0, len(ss))
	for i, s := range ss {
		c, err := cString(fmt.Sprintf("%s[%d]", what, i), s)
		if err != nil {
			out.free()
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

func (c cStrings) ptr() **C.char {
	if len(c) == 0 {
		return nil
	}
	return &c[0]
}

func (c cStrings) free() {
	for _, p := range c {
		C.free(unsafe.Pointer(p))
	}
}

// Wait blocks until every key exists; timeout <= 0 uses the store's.
func (s *Store) Wait(keys []string, timeout time.Duration) error {
	defer runtime.KeepAlive(s)
	p, err := s.acquire()
	if err != nil {
		return err
	}
	defer s.unacquire()
	ks, err := newCStrings("store keys", keys)
	if err != nil {
		return err
	}
	defer ks.free()
	t := C.int64_t(-1)
	if timeout > 0 {
		t = C.int64_t(positiveMillis(timeout))
	}
	var cerr *C.dk_error_t
	return check(C.dk_store_wait(p, ks.ptr(), C.size_t(len(ks)), t, &cerr), cerr)
}

// Check reports whether every key exists, without blocking.
func (s *Store) Check(keys []string) (bool, error) {
	defer runtime.KeepAlive(s)
	p, err := s.acquire()
	if err != nil {
		return false, err
	}
	defer s.unacquire()
	ks, err := newCStrings("store keys", keys)
	if err != nil {
		return false, err
	}
	defer ks.free()
	var out C.int32_t
	var cerr *C.dk_error_t
	err = check(C.dk_store_check(p, ks.ptr(), C.size_t(len(ks)), &out, &cerr), cerr)
	return out != 0, err
}

// DeleteKey deletes key and reports whether it existed.
func (s *Store) DeleteKey(key string) (bool, error) {
	defer runtime.KeepAlive(s)
	p, err := s.acquire()
	if err != nil {
		return false, err
	}
	defer s.unacquire()
	var out C.int32_t
	var cerr *C.dk_error_t
	err = withKey(key, &cerr, func(k *C.char) C.dk_status_t {
		return C.dk_store_delete_key(p, k, &out, &cerr)
	})
	return out != 0, err
}

// CompareSet is torch's compare_set: it sets desired if key holds expected
// (or is absent and expected is empty) and returns the value held after.
func (s *Store) CompareSet(key string, expected, desired []byte) ([]byte, error) {
	defer runtime.KeepAlive(s)
	p, err := s.acquire()
	if err != nil {
		return nil, err
	}
	defer s.unacquire()
	e, d := cBytes(expected), cBytes(desired)
	defer C.free(e)
	defer C.free(d)
	var data unsafe.Pointer
	var size C.size_t
	var cerr *C.dk_error_t
	if err := withKey(key, &cerr, func(k *C.char) C.dk_status_t {
		return C.dk_store_compare_set(p, k, e, C.size_t(len(expected)), d, C.size_t(len(desired)), &data, &size, &cerr)
	}); err != nil {
		return nil, err
	}
	return goBytes(data, size), nil
}

// Append appends value to key's value, creating it.
func (s *Store) Append(key string, value []byte) error {
	defer runtime.KeepAlive(s)
	p, err := s.acquire()
	if err != nil {
		return err
	}
	defer s.unacquire()
	v := cBytes(value)
	defer C.free(v)
	var cerr *C.dk_error_t
	return withKey(key, &cerr, func(k *C.char) C.dk_status_t {
		return C.dk_store_append(p, k, v, C.size_t(len(value)), &cerr)
	})
}

// MultiSet sets several keys at once.
func (s *Store) MultiSet(keys []string, values [][]byte) error {
	defer runtime.KeepAlive(s)
	p, err := s.acquire()
	if err != nil {
		return err
	}
	defer s.unacquire()
	if len(keys) != len(values) {
		return &Error{InvalidArgument, "distkit: MultiSet needs one value per key"}
	}
	ks, err := newCStrings("store keys", keys)
	if err != nil {
		return err
	}
	defer ks.free()
	vs := newByteList(values)
	defer vs.free()
	var cerr *C.dk_error_t
	return check(C.dk_store_multi_set(p, ks.ptr(), vs.ptr(), C.size_t(len(ks)), &cerr), cerr)
}

// MultiGet blocks until every key exists and returns the values in key order.
func (s *Store) MultiGet(keys []string) ([][]byte, error) {
	defer runtime.KeepAlive(s)
	p, err := s.acquire()
	if err != nil {
		return nil, err
	}
	defer s.unacquire()
	ks, err := newCStrings("store keys", keys)
	if err != nil {
		return nil, err
	}
	defer ks.free()
	var list *C.dk_bytes_t
	var cerr *C.dk_error_t
	if err := check(C.dk_store_multi_get(p, ks.ptr(), C.size_t(len(ks)), &list, &cerr), cerr); err != nil {
		return nil, err
	}
	return takeList(list, C.size_t(len(keys))), nil
}

// NumKeys is the number of keys in the store.
func (s *Store) NumKeys() (int64, error) {
	defer runtime.KeepAlive(s)
	p, err := s.acquire()
	if err != nil {
		return 0, err
	}
	defer s.unacquire()
	var out C.int64_t
	var cerr *C.dk_error_t
	err = check(C.dk_store_num_keys(p, &out, &cerr), cerr)
	return int64(out), err
}
