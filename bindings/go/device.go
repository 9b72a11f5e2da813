package distkit

/*
#include "distkit/distkit.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// DeviceType is a DLPack device type.
type DeviceType int32

const (
	CPU  DeviceType = C.kDLCPU
	CUDA DeviceType = C.kDLCUDA
)

// Device is where memory lives or a group computes (DLPack's device).
type Device struct {
	Type  DeviceType
	Index int
}

func (d Device) String() string {
	switch d.Type {
	case CPU:
		return "cpu"
	case CUDA:
		return fmt.Sprintf("cuda:%d", d.Index)
	}
	return fmt.Sprintf("device(%d):%d", int32(d.Type), d.Index)
}

func deviceOf(d C.DLDevice) Device {
	return Device{Type: DeviceType(d.device_type), Index: int(d.device_id)}
}

// RankDevice is this rank's device (mmengine's get_device): cuda:<local rank>
// when the library was built with CUDA and a GPU is usable, else the CPU.
func RankDevice() Device {
	var out C.DLDevice
	C.dk_get_device(&out)
	return deviceOf(out)
}

// CommDevice is where g's collectives compute, as its backend says: the CPU
// for gloo and mpi, cuda:<device> for nccl and "cpu:gloo,cuda:nccl".
func (g *Group) CommDevice() (Device, error) {
	var out C.DLDevice
	var cerr *C.dk_error_t
	if err := check(C.dk_group_comm_device(g.ptr, &out, &cerr), cerr); err != nil {
		return Device{}, err
	}
	return deviceOf(out), nil
}

// SetCudaStream names the CUDA stream (a cudaStream_t; nil: the legacy
// default stream) the caller's work on g's device runs on: every CUDA
// operation issued on g afterwards follows the work issued on it before.
// Ignored by groups without a CUDA device.
func (g *Group) SetCudaStream(stream unsafe.Pointer) error {
	var cerr *C.dk_error_t
	return check(C.dk_group_set_cuda_stream(g.ptr, stream, &cerr), cerr)
}
