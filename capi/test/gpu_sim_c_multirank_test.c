/* The C ABI on CUDA memory, from plain C, in every rank of a real job on the
 * CUDA + NCCL simulator (testing/gpu_sim; device memory the host cannot
 * touch, asynchronous streams): an "nccl" job, its comm device, DLTensors on
 * kDLCUDA through all_reduce (sum, mean, max), broadcast, all_gather and a
 * ring of sends, asynchronous work waited on, the caller's stream followed
 * (dk_group_set_cuda_stream), dk_tensor_copy between host and device, and a
 * host tensor refused by the NCCL group with a status. The program reaches
 * CUDA as any C trainer would: its runtime's functions, here taken from the
 * library DISTKIT_CUDART_LIBRARY names. */
#include <dlfcn.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distkit/distkit.h"
#include "testing/c/host_tensor.h"
#include "testing/c/rank_check.h"

static int size_, device_;

/* The few CUDA runtime calls a C trainer makes (cuda_runtime_api.h's
 * signatures, with opaque handles). */
typedef int (*set_device_fn)(int);
typedef int (*malloc_fn)(void**, size_t);
typedef int (*free_fn)(void*);
typedef int (*memcpy_fn)(void*, const void*, size_t, int);
typedef int (*memcpy_async_fn)(void*, const void*, size_t, int, void*);
typedef int (*stream_create_fn)(void**, unsigned);
typedef int (*stream_fn)(void*);
static set_device_fn cuda_set_device;
static malloc_fn cuda_malloc;
static free_fn cuda_free;
static memcpy_fn cuda_memcpy;
static memcpy_async_fn cuda_memcpy_async;
static stream_create_fn cuda_stream_create;
static stream_fn cuda_stream_sync, cuda_stream_destroy;
enum { kHostToDevice = 1, kDeviceToHost = 2, kNonBlocking = 1 };

static void* resolve(void* lib, const char* name) {
  void* f = dlsym(lib, name);
  if (f == NULL) dk_test_die(name, NULL);
  return f;
}

static void load_cuda(void) {
  const char* path = getenv("DISTKIT_CUDART_LIBRARY");
  void* lib = path ? dlopen(path, RTLD_NOW) : NULL;
  if (lib == NULL) dk_test_die("dlopen DISTKIT_CUDART_LIBRARY", NULL);
  /* POSIX's way to turn dlsym's pointer into a function pointer. */
  *(void**)(&cuda_set_device) = resolve(lib, "cudaSetDevice");
  *(void**)(&cuda_malloc) = resolve(lib, "cudaMalloc");
  *(void**)(&cuda_free) = resolve(lib, "cudaFree");
  *(void**)(&cuda_memcpy) = resolve(lib, "cudaMemcpy");
  *(void**)(&cuda_memcpy_async) = resolve(lib, "cudaMemcpyAsync");
  *(void**)(&cuda_stream_create) = resolve(lib, "cudaStreamCreateWithFlags");
  *(void**)(&cuda_stream_sync) = resolve(lib, "cudaStreamSynchronize");
  *(void**)(&cuda_stream_destroy) = resolve(lib, "cudaStreamDestroy");
}

/* n float32 values on this rank's device. */
typedef struct {
  float* dev;
  int64_t n;
  DLTensor t;
} DevVector;

/* In place: the tensor's shape points into *v. */
static void dev_vector(DevVector* v, int64_t n) {
  v->n = n;
  if (cuda_malloc((void**)&v->dev, sizeof(float) * (size_t)n) != 0)
    dk_test_die("cudaMalloc", NULL);
  memset(&v->t, 0, sizeof(v->t));
  v->t.data = v->dev;
  v->t.device.device_type = kDLCUDA;
  v->t.device.device_id = device_;
  v->t.ndim = 1;
  v->t.dtype.code = kDLFloat;
  v->t.dtype.bits = 32;
  v->t.dtype.lanes = 1;
  v->t.shape = &v->n;
}

/* Host -> device through the ABI's own copy, which is blocking. */
static void upload(DevVector* v, float* host) {
  int64_t n = v->n;
  DLTensor h = dk_test_float_vector(host, &n);
  DK_TEST_OK(dk_tensor_copy(&h, &v->t, &e_));
}

static void download(DevVector* v, float* host) {
  int64_t n = v->n;
  DLTensor h = dk_test_float_vector(host, &n);
  DK_TEST_OK(dk_tensor_copy(&v->t, &h, &e_));
}

static float value(int r, int64_t i) { return (float)((r * 3 + i) % 11 - 5); }

/* Element i's values summed over the ranks (small integers: exact). */
static double sum_over_ranks(int64_t i) {
  double sum = 0;
  for (int r = 0; r < size_; ++r) sum += value(r, i);
  return sum;
}

/* `host` all_reduced with `op` in v's CUDA memory and read back into
 * `back`; started and waited on through its work when `async`. */
static void all_reduce_through(dk_group_t* world, DevVector* v, float* host,
                               float* back, dk_reduce_op_t op, int async) {
  upload(v, host);
  dk_work_t* work = NULL;
  DK_TEST_OK(dk_group_all_reduce(world, &v->t, op, async ? &work : NULL, &e_));
  if (async) {
    DK_TEST_OK(dk_work_wait(work, -1, &e_));
    dk_work_destroy(work);
  }
  download(v, back);
}

int main(void) {
  dk_group_t* world = dk_test_init("nccl", 0);
  size_ = dk_group_size(world);
  DLDevice comm;
  DK_TEST_OK(dk_group_comm_device(world, &comm, &e_));
  dk_test_require(comm.device_type == kDLCUDA,
                  "the nccl group computes on CUDA");
  device_ = comm.device_id;
  load_cuda();
  if (cuda_set_device(device_) != 0) dk_test_die("cudaSetDevice", NULL);

  enum { N = 1000 };
  float host[N], back[N];
  float* all_host = malloc(sizeof(float) * N * (size_t)size_);
  DevVector v, all;
  dev_vector(&v, N);
  dev_vector(&all, N * size_);

  /* all_reduce: sum, then mean, then max (asynchronous, waited on). */
  for (int64_t i = 0; i < N; ++i) host[i] = value(dk_test_rank, i);
  all_reduce_through(world, &v, host, back, DK_OP_SUM, 0);
  for (int64_t i = 0; i < N; ++i)
    dk_test_require(back[i] == sum_over_ranks(i),
                    "all_reduce sum of CUDA memory");
  all_reduce_through(world, &v, host, back, DK_OP_MEAN, 0);
  for (int64_t i = 0; i < N; ++i) {
    dk_test_require(fabs(back[i] - sum_over_ranks(i) / size_) < 1e-5,
                    "all_reduce mean (ncclAvg)");
  }
  all_reduce_through(world, &v, host, back, DK_OP_MAX, 1);
  for (int64_t i = 0; i < N; ++i) {
    float want = value(0, i);
    for (int r = 1; r < size_; ++r)
      want = value(r, i) > want ? value(r, i) : want;
    dk_test_require(back[i] == want, "asynchronous all_reduce max");
  }

  /* broadcast from the last rank; all_gather in rank order. */
  upload(&v, host);
  DK_TEST_OK(dk_group_broadcast(world, &v.t, size_ - 1, NULL, &e_));
  download(&v, back);
  for (int64_t i = 0; i < N; ++i)
    dk_test_require(back[i] == value(size_ - 1, i),
                    "broadcast from the last rank");
  upload(&v, host);
  DK_TEST_OK(dk_group_all_gather(world, &v.t, &all.t, NULL, &e_));
  {
    int64_t n = N * size_;
    DLTensor h = dk_test_float_vector(all_host, &n);
    DK_TEST_OK(dk_tensor_copy(&all.t, &h, &e_));
  }
  for (int64_t i = 0; i < N * size_; ++i)
    dk_test_require(all_host[i] == value((int)(i / N), i % N), "all_gather");

  /* A ring of sends and receives, issued asynchronously. */
  if (size_ > 1) {
    DevVector got;
    dev_vector(&got, N);
    dk_work_t* s = NULL;
    dk_work_t* r = NULL;
    upload(&v, host);
    DK_TEST_OK(
        dk_group_send(world, &v.t, (dk_test_rank + 1) % size_, 0, &s, &e_));
    DK_TEST_OK(dk_group_recv(world, &got.t, (dk_test_rank + size_ - 1) % size_,
                             0, &r, &e_));
    DK_TEST_OK(dk_work_wait(s, -1, &e_));
    DK_TEST_OK(dk_work_wait(r, -1, &e_));
    dk_work_destroy(s);
    dk_work_destroy(r);
    download(&got, back);
    for (int64_t i = 0; i < N; ++i)
      dk_test_require(back[i] == value((dk_test_rank + size_ - 1) % size_, i),
                      "recv from the previous rank");
    cuda_free(got.dev);
  }

  /* The caller's stream: the input is written there asynchronously, just
   * before the all_reduce, which follows that stream. */
  {
    void* stream = NULL;
    if (cuda_stream_create(&stream, kNonBlocking) != 0)
      dk_test_die("cudaStreamCreateWithFlags", NULL);
    DK_TEST_OK(dk_group_set_cuda_stream(world, stream, &e_));
    for (int64_t i = 0; i < N; ++i) host[i] = value(dk_test_rank + 1, i);
    for (int64_t at = 0; at < N; at += N / 4) {
      if (cuda_memcpy_async(v.dev + at, host + at, sizeof(float) * (N / 4),
                            kHostToDevice, stream) != 0)
        dk_test_die("cudaMemcpyAsync", NULL);
    }
    DK_TEST_OK(dk_group_all_reduce(world, &v.t, DK_OP_SUM, NULL, &e_));
    if (size_ == 1) cuda_stream_sync(stream); /* nothing moved */
    download(&v, back);
    for (int64_t i = 0; i < N; ++i) {
      float want = 0;
      for (int r = 0; r < size_; ++r) want += value(r + 1, i);
      dk_test_require(back[i] == want,
                      "the all_reduce followed the caller's stream");
    }
    DK_TEST_OK(dk_group_set_cuda_stream(world, NULL, &e_));
    cuda_stream_sync(stream);
    cuda_stream_destroy(stream);
  }

  /* A host tensor straight to the NCCL group: a status naming why. */
  {
    int64_t n = N;
    DLTensor h = dk_test_float_vector(host, &n);
    dk_error_t* err = NULL;
    dk_status_t st = dk_group_all_reduce(world, &h, DK_OP_SUM, NULL, &err);
    dk_test_require(
        st == DK_INVALID_ARGUMENT && err != NULL &&
            strstr(dk_error_message(err), "cuda") != NULL,
        "a host tensor on the nccl group is refused, naming the device");
    dk_error_free(err);
  }

  cuda_free(v.dev);
  cuda_free(all.dev);
  free(all_host);
  dk_group_destroy(world);
  dk_shutdown();
  printf("rank %d: the C ABI on CUDA memory (nccl on the simulator): passed\n",
         dk_test_rank);
  return 0;
}
