/* libFuzzer target: the C ABI's argument validation, through libdistkit.so
 * as a foreign caller uses it. Bytes become a sequence of calls with fuzzed
 * arguments (tensor descriptions, dtypes, devices, reduction codes, ranks,
 * store keys, sizes and counts) on a one-rank world and an in-process store.
 * Sizes are either honest (the buffer behind them really has that many
 * bytes) or larger than any buffer can be, which the library must refuse
 * before reading anything: a caller that lies within those bounds is not
 * something any C library can detect. Every call must return a status; an
 * error must come with a message; nothing may crash. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distkit/distkit.h"

enum { kBuf = 4096 };
static unsigned char buffer[kBuf], out_buffer[kBuf];
static dk_store_t* store;
static dk_group_t* world;

typedef struct {
  const uint8_t* p;
  size_t n;
} Input;

static uint64_t take(Input* in, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) {
    v = (v << 8) | (in->n > 0 ? *in->p : 0);
    if (in->n > 0) {
      ++in->p;
      --in->n;
    }
  }
  return v;
}

/* An honest size (fits the buffer) or one no buffer can have. */
static size_t size_arg(Input* in, size_t honest_max) {
  switch (take(in, 1) % 4) {
    case 0:
      return SIZE_MAX - take(in, 1);
    case 1:
      return ((size_t)1 << 47) + 1 + take(in, 2); /* over the limit */
    default:
      return take(in, 2) % (honest_max + 1);
  }
}

static void require_message(dk_status_t s, dk_error_t* err) {
  if (s == DK_OK) return;
  if (err == NULL || dk_error_message(err) == NULL ||
      dk_error_message(err)[0] == '\0') {
    fprintf(stderr, "status %d without a message\n", (int)s);
    abort();
  }
  dk_error_free(err);
}

/* A tensor whose claimed bytes fit `buf` unless its shape is beyond any
 * buffer; fields fuzzed. */
static DLTensor tensor(Input* in, void* buf, int64_t* shape) {
  DLTensor t;
  memset(&t, 0, sizeof(t));
  t.ndim = (int)(take(in, 1) % 4);
  t.dtype.code = (uint8_t)(take(in, 1) % 8);
  t.dtype.bits = (uint8_t)(8u << (take(in, 1) % 5));
  t.dtype.lanes = (uint16_t)(take(in, 1) % 8 == 0 ? 2 : 1);
  t.device.device_type = (DLDeviceType)(take(in, 1) % 16);
  t.device.device_id = (int32_t)(take(in, 1) % 4);
  const int huge = take(in, 1) % 5 == 0;
  /* Elements that surely fit: the widest element drawn above is 128 bits
   * x 2 lanes = 32 bytes (an 8-byte budget let complex128 claim twice the
   * buffer, which the library cannot see and CI's fuzzing reported). */
  int64_t budget = kBuf / 32;
  for (int i = 0; i < t.ndim; ++i) {
    if (huge) {
      /* Every extent past 2^47, so the claim passes the library's 2^47-byte
       * limit (smaller "huge" shapes fit the address space: a lie within
       * bounds, which no library can see). */
      shape[i] = (int64_t)((take(in, 8) >> 2) | ((uint64_t)1 << 47)) + 1;
    } else {
      shape[i] = (int64_t)(take(in, 1) % 9);
      if (shape[i] > budget) shape[i] = budget;
      budget = shape[i] > 0 ? budget / shape[i] : budget;
    }
  }
  t.shape = shape;
  t.data = take(in, 1) % 8 == 0 ? NULL : buf;
  return t;
}

static void setup(void) {
  dk_error_t* err = NULL;
  dk_store_config_t cfg;
  dk_store_config_init(&cfg);
  cfg.address = "127.0.0.1:0";
  cfg.timeout_ms = 100;
  if (dk_store_serve(&cfg, &store, &err) != DK_OK) abort();
  dk_init_config_t init;
  dk_init_config_init(&init);
  init.timeout_ms = 2000;
  if (dk_init_with_store(store, 0, 1, &init, &world, &err) != DK_OK) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (store == NULL) setup();
  Input in = {data, size};
  int calls = 0;
  while (in.n > 0 && calls++ < 16) {
    dk_error_t* err = NULL;
    dk_status_t s = DK_OK;
    int64_t shape_a[4], shape_b[4];
    char key[24];
    const size_t key_len = take(&in, 1) % sizeof(key);
    for (size_t i = 0; i < key_len; ++i) key[i] = (char)(take(&in, 1) | 1);
    key[key_len] = '\0';
    switch (take(&in, 1) % 10) {
      case 0: {
        DLTensor a = tensor(&in, buffer, shape_a);
        DLTensor b = tensor(&in, out_buffer, shape_b);
        s = dk_tensor_copy(&a, &b, &err);
        break;
      }
      case 1: {
        DLTensor a = tensor(&in, buffer, shape_a);
        s = dk_group_all_reduce(world, &a, (dk_reduce_op_t)(take(&in, 1) % 8),
                                NULL, &err);
        break;
      }
      case 2: {
        DLTensor a = tensor(&in, buffer, shape_a);
        s = dk_group_broadcast(world, &a, (int32_t)(take(&in, 1) % 3) - 1, NULL,
                               &err);
        break;
      }
      case 3:
        s = dk_store_set(store, key, buffer, size_arg(&in, kBuf), &err);
        break;
      case 4:
        s = dk_store_append(store, key, buffer, size_arg(&in, 64), &err);
        break;
      case 5: {
        const char* keys[4] = {key, "a", "b", "c"};
        dk_bytes_t values[4] = {
            {buffer, 1}, {buffer, 2}, {buffer, 3}, {buffer, 4}};
        s = dk_store_multi_set(store, keys, values, size_arg(&in, 4), &err);
        break;
      }
      case 6: {
        int32_t ranks[4] = {(int32_t)take(&in, 1) - 2, 0, 1, -1};
        dk_group_t* g = NULL;
        s = dk_group_new(world, ranks, size_arg(&in, 4), &g, &err);
        if (s == DK_OK) dk_group_destroy(g);
        break;
      }
      case 7: {
        dk_bytes_t* items = NULL;
        size_t count = 0;
        s = dk_group_all_gather_object(world, buffer, size_arg(&in, 512),
                                       &items, &count, &err);
        if (s == DK_OK) dk_free(items);
        break;
      }
      case 8: {
        int64_t value = 0;
        s = dk_store_add(store, key, (int64_t)take(&in, 8), &value, &err);
        break;
      }
      default: {
        DLTensor a = tensor(&in, buffer, shape_a);
        DLTensor b = tensor(&in, out_buffer, shape_b);
        s = dk_group_all_gather(world, &a, &b, NULL, &err);
        break;
      }
    }
    require_message(s, err);
  }
  return 0;
}
