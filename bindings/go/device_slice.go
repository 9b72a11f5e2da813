package distkit

/*
#include <stdlib.h>
#include "distkit/distkit.h"

// A one-dimensional tensor on a device, in C memory like dkgo_tensor's.
static DLTensor* dkgo_device_tensor(void* data, int64_t n, uint8_t code,
                                    uint8_t bits, int32_t type, int32_t id) {
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

// DeviceSlice is Len elements of T in a device's memory (a CUDA device's,
// from the caller's own allocator), which collectives read and write in
// place; Go never touches it. Ptr must stay valid, and unused by anything
// else, while an operation has it.
type DeviceSlice[T Element] struct {
	Ptr    unsafe.Pointer
	Len    int
	Device Device
}

func deviceView[T Element](ts *tensors, s DeviceSlice[T]) *C.DLTensor {
	code, bits := dlpackType[T]()
	return ts.add(C.dkgo_device_tensor(s.Ptr, C.int64_t(s.Len), C.uint8_t(code),
		C.uint8_t(bits), C.int32_t(s.Device.Type), C.int32_t(s.Device.Index)))
}

// AllReduceDevice reduces device memory in place (an "nccl" or
// "cpu:gloo,cuda:nccl" group's CUDA device).
func AllReduceDevice[T Element](g *Group, data DeviceSlice[T], op ReduceOp) error {
	var ts tensors
	t := deviceView(&ts, data)
	_, err := g.run(ts, nil, false, func(p *C.dk_group_t, w **C.dk_work_t, e **C.dk_error_t) C.dk_status_t {
		return C.dk_group_all_reduce(p, t, C.dk_reduce_op_t(op), w, e)
	})
	return err
}

// BroadcastDevice copies root's device memory to every rank's.
func BroadcastDevice[T Element](g *Group, data DeviceSlice[T], root int) error {
	var ts tensors
	t := deviceView(&ts, data)
	_, err := g.run(ts, nil, false, func(p *C.dk_group_t, w **C.dk_work_t, e **C.dk_error_t) C.dk_status_t {
		return C.dk_group_broadcast(p, t, C.int32_t(root), w, e)
	})
	return err
}

// AllGatherDevice gathers device memory: output holds Size() * input.Len
// elements, in rank order.
func AllGatherDevice[T Element](g *Group, input, output DeviceSlice[T]) error {
	var ts tensors
	i, o := deviceView(&ts, input), deviceView(&ts, output)
	_, err := g.run(ts, nil, false, func(p *C.dk_group_t, w **C.dk_work_t, e **C.dk_error_t) C.dk_status_t {
		return C.dk_group_all_gather(p, i, o, w, e)
	})
	return err
}
