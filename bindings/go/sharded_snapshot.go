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
	"unsafe"
)

// ShardedSnapshot is sharded state kept in peers' memory
// (dk_sharded_snapshot_*, ABI 0.10), where each rank's shard exists once
// (FSDP: Shard.Local's values and the optimizer's per-element state of each
// flat buffer). Register this rank's buffers once (RegisterShardBuffer) and
// Commit on the group the shards are laid out on: each rank's copy also goes
// to its left-hand neighbour, so rank r holds shards r and r + 1 mod N (2/N
// of the state) and any one lost shard survives. After Group.Shrink or
// Group.Grow every member of the new group (a replacement with a new, empty
// snapshot) calls Fetch, naming the shards it needs (its own when the group
// kept its size, every shard to lay the state out over fewer ranks), reads
// them with ShardBytes or ShardValues, loads them (for parameters Shard.LoadSharded) and
// commits a new snapshot of the new layout.
//
// As Snapshot, the library copies from C memory this type owns: Commit
// copies the registered slices there. One goroutine at a time; Close it.
type ShardedSnapshot struct {
	ptr     *C.dk_sharded_snapshot_t
	buffers stagedBuffers
}

// NewShardedSnapshot is an empty sharded snapshot: no buffers, nothing
// committed.
func NewShardedSnapshot() (*ShardedSnapshot, error) {
	if err := CheckVersion(); err != nil {
		return nil, err
	}
	s := &ShardedSnapshot{}
	var cerr *C.dk_error_t
	if err := check(C.dk_sharded_snapshot_create(&s.ptr, &cerr), cerr); err != nil {
		return nil, err
	}
	runtime.SetFinalizer(s, (*ShardedSnapshot).Close)
	return s, nil
}

// RegisterShardBuffer adds data (this rank's part of a sharded state, its
// elements by reference) to s under name. Every rank registers the same
// names in the same order (sizes may differ); all before the first Commit or
// Fetch (FailedPrecondition afterwards: a new layout takes a new snapshot).
func RegisterShardBuffer[T Element](s *ShardedSnapshot, name string, data []T) error {
	if err := s.live(); err != nil {
		return err
	}
	defer runtime.KeepAlive(s)
	return stageBuffer(&s.buffers, name, data, func(cname *C.char, staging unsafe.Pointer, bytes C.size_t, cerr **C.dk_error_t) C.dk_status_t {
		return C.dk_sharded_snapshot_register(s.ptr, cname, staging, bytes, cerr)
	})
}

func (s *ShardedSnapshot) live() error {
	if s.ptr == nil {
		return &Error{FailedPrecondition, "sharded snapshot: closed"}
	}
	return nil
}

// Commit is collective over g, whose rank r holds shard r: it copies the
// registered slices and exchanges the copies with the neighbours. The commit
// is numbered one past the newest any member holds and comes into force once
// every member holds its part (a failure before that keeps both it and the
// one before to fetch from). InvalidArgument on every member when the names
// differ.
func (s *ShardedSnapshot) Commit(g *Group) error {
	if err := s.live(); err != nil {
		return err
	}
	s.buffers.save()
	var cerr *C.dk_error_t
	// Collective over g: issued as g's calls are (Group.issue).
	err := g.issue("sharded_snapshot_commit", func() error {
		return check(C.dk_sharded_snapshot_commit(s.ptr, g.ptr, &cerr), cerr)
	})
	runtime.KeepAlive(s) // its finalizer must not free the snapshot mid-call
	runtime.KeepAlive(g)
	return err
}

// Fetch is collective over g, made after a change of membership: the members
// agree on the newest commit whose every shard some member holds, and each
// receives the shards it names in wanted (ranks of the group that committed;
// nil: every shard). It returns that commit's number and its group's size.
// On every member alike: FailedPrecondition when no member holds a commit,
// DataLoss naming the shards when neighbours were lost together,
// InvalidArgument for an index outside the commit's group.
func (s *ShardedSnapshot) Fetch(g *Group, wanted []int) (commit int64, world int, err error) {
	if err := s.live(); err != nil {
		return 0, 0, err
	}
	var ptr *C.int32_t
	n := len(wanted)
	if wanted != nil {
		list := (*C.int32_t)(C.malloc(C.size_t(4*n) + 4))
		defer C.free(unsafe.Pointer(list))
		view := unsafe.Slice(list, n)
		for i, w := range wanted {
			// An index no int32 holds is outside every group: passed on as
			// one, so the library refuses it on every member alike (an
			// early return here would leave the others in the collective).
			switch {
			case w < 0:
				w = -1
			case w > math.MaxInt32:
				w = math.MaxInt32
			}
			view[i] = C.int32_t(w)
		}
		ptr = list
	}
	var c C.int64_t
	var w C.int32_t
	var cerr *C.dk_error_t
	err = g.issue("sharded_snapshot_fetch", func() error {
		return check(C.dk_sharded_snapshot_fetch(s.ptr, g.ptr, ptr, C.size_t(n), &c, &w, &cerr), cerr)
	})
	runtime.KeepAlive(s)
	runtime.KeepAlive(g)
	if err != nil {
		return 0, 0, err
	}
	return int64(c), int(w), nil
}

// ShardBytes is, after Fetch, a copy of buffer `buffer` (in registration
// order) of shard `index`, as its rank committed it (NotFound for a shard not
// fetched, OutOfRange for a buffer past the shard's).
func (s *ShardedSnapshot) ShardBytes(index, buffer int) ([]byte, error) {
	if err := s.live(); err != nil {
		return nil, err
	}
	if index < 0 || index > math.MaxInt32 {
		return nil, &Error{NotFound, fmt.Sprintf("sharded snapshot: shard %d was not fetched", index)}
	}
	if buffer < 0 || buffer > math.MaxInt32 {
		return nil, &Error{OutOfRange, fmt.Sprintf("sharded snapshot: buffer %d of shard %d", buffer, index)}
	}
	var data unsafe.Pointer
	var bytes C.size_t
	var cerr *C.dk_error_t
	if err := check(C.dk_sharded_snapshot_shard(s.ptr, C.int32_t(index), C.int32_t(buffer), &data, &bytes, &cerr), cerr); err != nil {
		return nil, err
	}
	// A copy (shards may pass 2 GiB, past C.GoBytes), made before the
	// snapshot may be finalized: the bytes are the library's until then.
	out := make([]byte, int(bytes))
	if bytes > 0 {
		copy(out, unsafe.Slice((*byte)(data), int(bytes)))
	}
	runtime.KeepAlive(s)
	return out, nil
}

// ShardValues is ShardBytes as elements of T (a copy; InvalidArgument when
// the buffer is not a whole number of them). As bool, each byte is whether
// it is non-zero (any language's true, Go's exact true).
func ShardValues[T Element](s *ShardedSnapshot, index, buffer int) ([]T, error) {
	b, err := s.ShardBytes(index, buffer)
	if err != nil {
		return nil, err
	}
	var z T
	size := int(unsafe.Sizeof(z))
	if len(b)%size != 0 {
		return nil, &Error{InvalidArgument, fmt.Sprintf("sharded snapshot: buffer %d of shard %d (%d bytes) is not a %d-byte element array", buffer, index, len(b), size)}
	}
	out := make([]T, len(b)/size)
	if flags, ok := any(out).([]bool); ok {
		loadBools(flags, b) // a peer's byte 2 is true, as in Snapshot
		return out, nil
	}
	if len(out) > 0 {
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&out[0])), len(b)), b)
	}
	return out, nil
}

// CommitNumber is the number of the commit in force; 0 when none is.
func (s *ShardedSnapshot) CommitNumber() int64 {
	return snapshotQuery(s.ptr, s, func(p *C.dk_sharded_snapshot_t) C.int64_t { return C.dk_sharded_snapshot_commit_number(p) })
}

// Bytes is the memory the library's snapshot holds: this rank's shard and
// its neighbour's, a pending commit's, and what Fetch received (this
// binding's staging copy of this rank's buffers adds their size).
func (s *ShardedSnapshot) Bytes() int64 {
	return snapshotQuery(s.ptr, s, func(p *C.dk_sharded_snapshot_t) C.int64_t { return C.dk_sharded_snapshot_bytes(p) })
}

// Close frees the snapshot and its copies; the registered slices stay.
func (s *ShardedSnapshot) Close() {
	if s.ptr != nil {
		C.dk_sharded_snapshot_destroy(s.ptr)
		s.ptr = nil
		s.buffers.free()
	}
}
