package distkit

/*
#include "distkit/distkit.h"
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
	return tensor[T](ts, s.Ptr, s.Len, s.Device)
}

// deviceArgs refuses a device index the ABI's int32_t cannot hold (DLPack's
// device_id; a conversion would wrap Device{CUDA, 1<<32} onto cuda:0).
func deviceArgs(op string, devices ...Device) error {
	for _, d := range devices {
		if err := int32Arg(op, "device index", d.Index); err != nil {
			return err
		}
	}
	return nil
}

// AllReduceDevice reduces device memory in place (an "nccl" or
// "cpu:gloo,cuda:nccl" group's CUDA device).
func AllReduceDevice[T Element](g *Group, data DeviceSlice[T], op ReduceOp) error {
	if err := deviceArgs("all_reduce", data.Device); err != nil {
		return err
	}
	var ts tensors
	t := deviceView(&ts, data)
	return g.call(ts, nil, allReduceOf(t, op))
}

// BroadcastDevice copies root's device memory to every rank's.
func BroadcastDevice[T Element](g *Group, data DeviceSlice[T], root int) error {
	if err := int32Arg("broadcast", "root", root); err != nil {
		return err
	}
	if err := deviceArgs("broadcast", data.Device); err != nil {
		return err
	}
	var ts tensors
	t := deviceView(&ts, data)
	return g.call(ts, nil, broadcastOf(t, root))
}

// AllGatherDevice gathers device memory: output holds Size() * input.Len
// elements, in rank order.
func AllGatherDevice[T Element](g *Group, input, output DeviceSlice[T]) error {
	if err := deviceArgs("all_gather", input.Device, output.Device); err != nil {
		return err
	}
	var ts tensors
	i, o := deviceView(&ts, input), deviceView(&ts, output)
	return g.call(ts, nil, allGatherOf(i, o))
}
