/* A DLTensor describing host memory, for the C programs that call the ABI
 * (the C tests, the fault-injection and start-up ranks): one place that fills
 * in DLPack's fields, so each program names only its data, shape and type. */

#ifndef DISTKIT_TESTING_C_HOST_TENSOR_H_
#define DISTKIT_TESTING_C_HOST_TENSOR_H_

#include <stdint.h>
#include <string.h>

#include "distkit/distkit.h"

/* `ndim` dimensions of `shape` over `data` on the host, elements of DLPack
 * type `code` (kDLFloat, kDLInt, ...) and `bits` bits. The tensor points at
 * `data` and `shape`; both must outlive it. */
static inline DLTensor dk_test_host_tensor(void* data, int64_t* shape, int ndim,
                                           int code, int bits) {
  DLTensor t;
  memset(&t, 0, sizeof(t));
  t.data = data;
  t.device.device_type = kDLCPU;
  t.ndim = ndim;
  t.dtype.code = (uint8_t)code;
  t.dtype.bits = (uint8_t)bits;
  t.dtype.lanes = 1;
  t.shape = shape;
  return t;
}

/* A vector of `*numel` float32 values: the common case. */
static inline DLTensor dk_test_float_vector(float* data, int64_t* numel) {
  return dk_test_host_tensor(data, numel, 1, kDLFloat, 32);
}

#endif /* DISTKIT_TESTING_C_HOST_TENSOR_H_ */
