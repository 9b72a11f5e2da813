// The Go binding on device memory (a test program under internal/): every
// rank of an "nccl" job on the CUDA + NCCL simulator (testing/gpu_sim)
// all-reduces (sum, mean, max), broadcasts and all-gathers DeviceSlices and
// follows the caller's stream, with device memory from the CUDA runtime the
// library DISTKIT_CUDART_LIBRARY names, as a Go GPU package would get it.
package main

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>

typedef int (*set_device_fn)(int);
typedef int (*malloc_fn)(void**, size_t);
typedef int (*memcpy_fn)(void*, const void*, size_t, int);
typedef int (*memcpy_async_fn)(void*, const void*, size_t, int, void*);
typedef int (*stream_create_fn)(void**, unsigned);
typedef int (*stream_fn)(void*);

static set_device_fn set_device;
static malloc_fn cuda_malloc;
static memcpy_fn cuda_memcpy;
static memcpy_async_fn cuda_memcpy_async;
static stream_create_fn stream_create;
static stream_fn stream_sync;

// 0 when every function was found in the library at path.
static int load_cuda(const char* path) {
  void* lib = dlopen(path, RTLD_NOW);
  if (lib == NULL) return 1;
  set_device = (set_device_fn)dlsym(lib, "cudaSetDevice");
  cuda_malloc = (malloc_fn)dlsym(lib, "cudaMalloc");
  cuda_memcpy = (memcpy_fn)dlsym(lib, "cudaMemcpy");
  cuda_memcpy_async = (memcpy_async_fn)dlsym(lib, "cudaMemcpyAsync");
  stream_create = (stream_create_fn)dlsym(lib, "cudaStreamCreateWithFlags");
  stream_sync = (stream_fn)dlsym(lib, "cudaStreamSynchronize");
  return !(set_device && cuda_malloc && cuda_memcpy && cuda_memcpy_async &&
           stream_create && stream_sync);
}
static int dev_set(int d) { return set_device(d); }
static void* dev_alloc(size_t bytes) {
  void* p = NULL;
  return cuda_malloc(&p, bytes) == 0 ? p : NULL;
}
// Blocking: cudaMemcpy from pageable memory may return before the device
// has the bytes, so the legacy stream is drained after it.
static int upload(void* dst, const void* src, size_t n) {
  return cuda_memcpy(dst, src, n, 1) || stream_sync(NULL);
}
static int download(void* dst, const void* src, size_t n) {
  return cuda_memcpy(dst, src, n, 2);
}
static int upload_async(void* dst, const void* src, size_t n, void* stream) {
  return cuda_memcpy_async(dst, src, n, 1, stream);
}
static void* new_stream(void) {
  void* s = NULL;
  return stream_create(&s, 1) == 0 ? s : NULL;
}
static int drain(void* stream) { return stream_sync(stream); }
*/
import "C"

import (
	"fmt"
	"os"
	"unsafe"

	dk "distkit.dev/distkit"
	rc "distkit.dev/distkit/internal/tests/rankcheck"
	"distkit.dev/distkit/internal/tests/reducercheck"
)

var rank, size int

func value(r, i int) float32 { return float32((r*3+i)%11 - 5) }

// A device buffer of n float32, with C staging for copies in and out.
type buffer struct {
	ptr    unsafe.Pointer
	n      int
	device dk.Device
}

func newBuffer(n int, device dk.Device) buffer {
	p := C.dev_alloc(C.size_t(n * 4))
	if p == nil {
		rc.Fail("cudaMalloc")
	}
	return buffer{p, n, device}
}

func (b buffer) slice() dk.DeviceSlice[float32] {
	return dk.DeviceSlice[float32]{Ptr: b.ptr, Len: b.n, Device: b.device}
}

func (b buffer) upload(v []float32) {
	host := C.malloc(C.size_t(len(v) * 4))
	defer C.free(host)
	copy(unsafe.Slice((*float32)(host), len(v)), v)
	if C.upload(b.ptr, host, C.size_t(len(v)*4)) != 0 {
		rc.Fail("upload")
	}
}

func (b buffer) read() []float32 {
	host := C.malloc(C.size_t(b.n * 4))
	defer C.free(host)
	if C.download(host, b.ptr, C.size_t(b.n*4)) != 0 {
		rc.Fail("download")
	}
	return append([]float32(nil), unsafe.Slice((*float32)(host), b.n)...)
}

func main() {
	world, err := dk.Init("pytorch", dk.InitOptions{Backend: "nccl"})
	rc.Must(err, "init on nccl")
	rank, size = world.Rank(), world.Size()
	rc.Rank = rank
	device, err := world.CommDevice()
	rc.Must(err, "comm device")
	if device.Type != dk.CUDA {
		rc.Fail("the nccl group computes on %v", device)
	}
	path := C.CString(os.Getenv("DISTKIT_CUDART_LIBRARY"))
	defer C.free(unsafe.Pointer(path))
	if C.load_cuda(path) != 0 {
		rc.Fail("the CUDA runtime at DISTKIT_CUDART_LIBRARY")
	}
	C.dev_set(C.int(device.Index))
	const n = 1000
	mine := make([]float32, n)
	for i := range mine {
		mine[i] = value(rank, i)
	}
	buf := newBuffer(n, device)
	for _, c := range []struct {
		op   dk.ReduceOp
		name string
	}{{dk.Sum, "sum"}, {dk.Mean, "mean"}, {dk.Max, "max"}} {
		buf.upload(mine)
		rc.Must(dk.AllReduceDevice(world, buf.slice(), c.op), "all_reduce "+c.name)
		for i, got := range buf.read() {
			var sum, max float32 = 0, -1e9
			for r := 0; r < size; r++ {
				sum += value(r, i)
				if value(r, i) > max {
					max = value(r, i)
				}
			}
			want := map[string]float32{"sum": sum, "mean": sum / float32(size), "max": max}[c.name]
			if d := got - want; d > 1e-5 || d < -1e-5 {
				rc.Fail("all_reduce %s[%d]: got %v, want %v", c.name, i, got, want)
			}
		}
	}
	buf.upload(mine)
	rc.Must(dk.BroadcastDevice(world, buf.slice(), size-1), "broadcast")
	for i, got := range buf.read() {
		if got != value(size-1, i) {
			rc.Fail("broadcast[%d]: got %v", i, got)
		}
	}
	buf.upload(mine)
	all := newBuffer(n*size, device)
	rc.Must(dk.AllGatherDevice(world, buf.slice(), all.slice()), "all_gather")
	for i, got := range all.read() {
		if got != value(i/n, i%n) {
			rc.Fail("all_gather[%d]: got %v", i, got)
		}
	}
	// The caller's stream: the input written there just before.
	stream := C.new_stream()
	if stream == nil {
		rc.Fail("cudaStreamCreateWithFlags")
	}
	rc.Must(world.SetCudaStream(stream), "SetCudaStream")
	next := C.malloc(C.size_t(n * 4))
	defer C.free(next)
	nv := unsafe.Slice((*float32)(next), n)
	for i := range nv {
		nv[i] = value(rank+1, i)
	}
	for at := 0; at < n; at += n / 4 {
		if C.upload_async(unsafe.Add(buf.ptr, at*4), unsafe.Add(next, at*4), C.size_t(n/4*4), stream) != 0 {
			rc.Fail("cudaMemcpyAsync")
		}
	}
	rc.Must(dk.AllReduceDevice(world, buf.slice(), dk.Sum), "all_reduce on the caller's stream")
	if size == 1 {
		C.drain(stream) // nothing moved: read after the caller's stream
	}
	for i, got := range buf.read() {
		var want float32
		for r := 0; r < size; r++ {
			want += value(r+1, i)
		}
		if got != want {
			rc.Fail("the all_reduce did not follow the caller's stream: [%d] = %v, want %v", i, got, want)
		}
	}
	rc.Must(world.SetCudaStream(nil), "SetCudaStream(nil)")
	C.drain(stream)
	// The Reducer's buckets live on the comm device: a parameter this rank
	// did not use still gets the others' average, copied from the device.
	reducercheck.UnusedParameters(world, rank, size)
	reducercheck.AbandonedIteration(world, rank, size)
	fmt.Printf("rank %d: the Go binding on device memory (nccl on the simulator): passed\n", rank)
}
