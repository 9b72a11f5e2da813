package distkit

/*
#include <stdlib.h>
#include "distkit/distkit.h"
*/
import "C"

import "unsafe"

// Memory crossing the ABI. Results the library allocates (ABI convention 7)
// are copied into Go values and freed with dk_free in the call that got
// them; inputs that must not live in Go memory (cgo forbids passing Go
// memory that holds Go pointers) are copied into C memory the caller frees.

// goBytes copies a library-owned byte buffer and frees it.
func goBytes(p unsafe.Pointer, n C.size_t) []byte {
	// C.GoBytes takes a C.int length: sizes of 2 GiB and more would not fit.
	defer C.dk_free(p)
	if p == nil || n == 0 {
		return []byte{}
	}
	return append([]byte(nil), unsafe.Slice((*byte)(p), int(n))...)
}

// takeList copies a library-owned list of byte strings and frees it (one
// allocation holds the array and the bytes).
func takeList(list *C.dk_bytes_t, count C.size_t) [][]byte {
	if list == nil {
		return nil
	}
	defer C.dk_free(unsafe.Pointer(list))
	items := unsafe.Slice(list, int(count))
	out := make([][]byte, len(items))
	for i, it := range items {
		// Not C.GoBytes: its C.int length truncates sizes of 2 GiB and more.
		out[i] = []byte{}
		if it.data != nil && it.size > 0 {
			out[i] = append(out[i], unsafe.Slice((*byte)(unsafe.Pointer(it.data)), int(it.size))...)
		}
	}
	return out
}

// cBytes copies b into C memory (free it with C.free; nil when b is empty).
func cBytes(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return C.CBytes(b)
}

// byteList is a C array of dk_bytes_t whose data is in C memory.
type byteList struct {
	items []C.dk_bytes_t
}

func newByteList(values [][]byte) byteList {
	l := byteList{items: make([]C.dk_bytes_t, len(values))}
	for i, v := range values {
		l.items[i] = C.dk_bytes_t{data: cBytes(v), size: C.size_t(len(v))}
	}
	return l
}

func (l byteList) ptr() *C.dk_bytes_t {
	if len(l.items) == 0 {
		return nil
	}
	return &l.items[0]
}

func (l byteList) free() {
	for _, it := range l.items {
		C.free(unsafe.Pointer(it.data))
	}
}

// cTensorArray copies ptrs into C memory (free it with C.free): cgo may not
// pass Go memory holding pointers.
func cTensorArray(ptrs []*C.DLTensor) **C.DLTensor {
	cptrs := (**C.DLTensor)(C.malloc(C.size_t(len(ptrs)) * C.size_t(unsafe.Sizeof((*C.DLTensor)(nil)))))
	copy(unsafe.Slice(cptrs, len(ptrs)), ptrs)
	return cptrs
}
