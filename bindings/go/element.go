package distkit

/*
#include <stdlib.h>
#include "distkit/distkit.h"

// A one-dimensional tensor in C memory (the shape follows the struct), so
// no Go memory ever holds a pointer the library keeps.
static DLTensor* dkgo_tensor(void* data, int64_t n, uint8_t code, uint8_t bits,
                             int32_t type, int32_t id) {
  DLTensor* t = (DLTensor*)calloc(1, sizeof(DLTensor) + sizeof(int64_t));
  if (t == NULL) return NULL;
  int64_t* shape = (int64_t*)(t + 1);
  *shape = n;
  t->data = data;
  t->device.device_type = (DLDeviceType)type;
  t->device.device_id = id;
  t->ndim = 1;
  t->dtype.code = code;
  t->dtype.bits = bits;
  t->dtype.lanes = 1;
  t->shape = shape;
  return t;
}
*/
import "C"

import "unsafe"

// Element lists the element types collectives take.
type Element interface {
	float32 | float64 | int8 | uint8 | int32 | int64 | bool | Float16 | BFloat16
}

// dlpackType is T's DLPack code and bits (bool: distkit's (kDLUInt, 1)).
func dlpackType[T Element]() (code, bits uint8) {
	var zero T
	switch any(zero).(type) {
	case float32:
		return C.kDLFloat, 32
	case float64:
		return C.kDLFloat, 64
	case int8:
		return C.kDLInt, 8
	case uint8:
		return C.kDLUInt, 8
	case int32:
		return C.kDLInt, 32
	case int64:
		return C.kDLInt, 64
	case bool:
		return C.kDLUInt, 1
	case Float16:
		return C.kDLFloat, 16
	default: // BFloat16
		return C.kDLBfloat, 16
	}
}

// tensors is a set of C-allocated DLTensors lent to one call or one Work.
type tensors []*C.DLTensor

func (ts *tensors) add(t *C.DLTensor) *C.DLTensor {
	*ts = append(*ts, t)
	return t
}

func (ts tensors) free() {
	for _, t := range ts {
		if t != nil {
			C.free(unsafe.Pointer(t))
		}
	}
}

// tensor describes n elements of T at data, on device, to the library.
func tensor[T Element](ts *tensors, data unsafe.Pointer, n int, device Device) *C.DLTensor {
	code, bits := dlpackType[T]()
	return ts.add(C.dkgo_tensor(data, C.int64_t(n), C.uint8_t(code), C.uint8_t(bits),
		C.int32_t(device.Type), C.int32_t(device.Index)))
}

// view describes s to the library (nil for a nil slice: "not given").
func view[T Element](ts *tensors, s []T) *C.DLTensor {
	if s == nil {
		return nil
	}
	var data unsafe.Pointer
	if len(s) > 0 {
		data = unsafe.Pointer(&s[0])
	}
	return tensor[T](ts, data, len(s), Device{Type: CPU})
}

// viewArray describes every slice of bufs to the library in a C array (free
// it with C.free), as the calls taking several buffers want them.
func viewArray[T Element](ts *tensors, bufs [][]T) **C.DLTensor {
	ptrs := make([]*C.DLTensor, len(bufs)+1) // never empty: C.malloc(0) may be nil
	for i, b := range bufs {
		ptrs[i] = view(ts, b)
	}
	return cTensorArray(ptrs)
}

// rawView describes n elements of T at p (C memory) to the library.
func rawView[T Element](ts *tensors, p unsafe.Pointer, n int) *C.DLTensor {
	return tensor[T](ts, p, n, Device{Type: CPU})
}
