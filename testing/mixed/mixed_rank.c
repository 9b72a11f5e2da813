/* The C rank of the mixed-language job (see README.md): the C ABI. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distkit/distkit.h"

#define N 9
static int rank_, size_;

static void die(const char* what, dk_error_t* err) {
  fprintf(stderr, "rank %d (c): FAILED: %s%s%s\n", rank_, what, err ? ": " : "",
          err ? dk_error_message(err) : "");
  exit(1);
}
#define OK(call)                         \
  do {                                   \
    dk_error_t* e_ = NULL;               \
    if ((call) != DK_OK) die(#call, e_); \
  } while (0)

static DLTensor view(void* data, int64_t* shape, uint8_t code, uint8_t bits) {
  DLTensor t;
  memset(&t, 0, sizeof(t));
  t.data = data;
  t.device.device_type = kDLCPU;
  t.ndim = 1;
  t.dtype.code = code;
  t.dtype.bits = bits;
  t.dtype.lanes = 1;
  t.shape = shape;
  return t;
}

static void obj(int r, char* out) {
  out[0] = '\0';
  for (int k = 0; k <= r; ++k) sprintf(out + strlen(out), "rank-%d;", r);
}

int main(void) {
  dk_group_t* world = NULL;
  dk_init_config_t config;
  dk_init_config_init(&config);
  OK(dk_init_version(DK_ABI_MAJOR, DK_ABI_MINOR, &e_));
  OK(dk_init("pytorch", &config, &world, &e_));
  rank_ = dk_group_rank(world);
  size_ = dk_group_size(world);
  const int n = size_, r = rank_;
  int64_t shape = N, i64[N];
  float f32[N];
  DLTensor ti = view(i64, &shape, kDLInt, 64),
           tf = view(f32, &shape, kDLFloat, 32);

  for (int i = 0; i < N; ++i) i64[i] = (int64_t)(r + 1) * (i + 1);
  OK(dk_group_all_reduce(world, &ti, DK_OP_SUM, NULL, &e_));
  for (int i = 0; i < N; ++i)
    if (i64[i] != (int64_t)n * (n + 1) / 2 * (i + 1)) die("sum int64", NULL);
  for (int i = 0; i < N; ++i) i64[i] = (7 * r + i) % 11;
  OK(dk_group_all_reduce(world, &ti, DK_OP_MAX, NULL, &e_));
  for (int i = 0; i < N; ++i) {
    int64_t want = 0;
    for (int q = 0; q < n; ++q)
      if ((7 * q + i) % 11 > want) want = (7 * q + i) % 11;
    if (i64[i] != want) die("max int64", NULL);
  }
  for (int i = 0; i < N; ++i) f32[i] = 0.5f * (r + 1) + i;
  OK(dk_group_all_reduce(world, &tf, DK_OP_SUM, NULL, &e_));
  for (int i = 0; i < N; ++i)
    if (f32[i] != 0.25f * n * (n + 1) + (float)n * i) die("sum float32", NULL);
  for (int i = 0; i < N; ++i) f32[i] = r - 0.25f * i;
  OK(dk_group_all_reduce(world, &tf, DK_OP_MAX, NULL, &e_));
  for (int i = 0; i < N; ++i)
    if (f32[i] != (n - 1) - 0.25f * i) die("max float32", NULL);
  for (int q = 0; q < n; ++q) {
    for (int i = 0; i < N; ++i) i64[i] = r == q ? 1000 * q + i : -1;
    OK(dk_group_broadcast(world, &ti, q, NULL, &e_));
    for (int i = 0; i < N; ++i) f32[i] = r == q ? q + 0.125f * i : -1;
    OK(dk_group_broadcast(world, &tf, q, NULL, &e_));
    for (int i = 0; i < N; ++i)
      if (i64[i] != 1000 * q + i || f32[i] != q + 0.125f * i)
        die("broadcast", NULL);
  }
  int64_t mine[3] = {10 * r, 10 * r + 1, 10 * r + 2}, three = 3, all_n = 3 * n;
  int64_t* all = calloc(3 * n, sizeof(int64_t));
  DLTensor tin = view(mine, &three, kDLInt, 64),
           tout = view(all, &all_n, kDLInt, 64);
  OK(dk_group_all_gather(world, &tin, &tout, NULL, &e_));
  for (int j = 0; j < 3 * n; ++j)
    if (all[j] != 10 * (j / 3) + j % 3) die("all_gather", NULL);
  free(all);

  char buf[256], want[256];
  obj(r, buf);
  dk_bytes_t* items = NULL;
  size_t count = 0;
  OK(dk_group_all_gather_object(world, buf, strlen(buf), &items, &count, &e_));
  if ((int)count != n) die("all_gather_object count", NULL);
  for (int q = 0; q < n; ++q) {
    obj(q, want);
    if (items[q].size != strlen(want) ||
        memcmp(items[q].data, want, items[q].size) != 0)
      die("all_gather_object", NULL);
  }
  dk_free(items);
  OK(dk_group_all_gather_object(world, "c", 1, &items, &count, &e_));
  const char* names[] = {"c", "c++", "python", "rust", "go"};
  int seen[5] = {0};
  printf("rank %d (c): languages:", r);
  for (size_t q = 0; q < count; ++q) {
    int found = -1;
    for (int k = 0; k < 5; ++k)
      if (items[q].size == strlen(names[k]) &&
          memcmp(items[q].data, names[k], items[q].size) == 0)
        found = k;
    if (found < 0 || seen[found]++) die("language names", NULL);
    printf(" %s", names[found]);
  }
  printf("\n");
  dk_free(items);

  /* 9: one model sharded across the languages (README). */
  {
    float w[10];
    int64_t ten = 10;
    for (int i = 0; i < 10; ++i) w[i] = r == 0 ? 0.1f * i : -5.0f;
    DLTensor tw = view(w, &ten, kDLFloat, 32);
    DLTensor* ps[1] = {&tw};
    dk_shard_config_t sc;
    dk_shard_config_init(&sc);
    sc.sync_module_states = 1;
    dk_shard_t* unit = NULL;
    OK(dk_shard_create(world, ps, 1, NULL, &sc, &unit, &e_));
    for (int step = 0; step < 3; ++step) {
      float* full = NULL;
      float g[10];
      OK(dk_shard_unshard(unit, &e_));
      OK(dk_shard_full_param(unit, 0, (void**)&full, &e_));
      for (int i = 0; i < 10; ++i) g[i] = (r + 1) * 0.1f * full[i] + 0.01f * i;
      OK(dk_shard_reshard(unit, &e_));
      DLTensor tg = view(g, &ten, kDLFloat, 32);
      OK(dk_shard_accumulate_grad(unit, 0, &tg, &e_));
      OK(dk_shard_reduce_grads(unit, &e_));
      float *vals = NULL, *grads = NULL;
      int64_t len = 0;
      dk_dtype_t dt;
      OK(dk_shard_local(unit, 0, (void**)&vals, (void**)&grads, &len, &dt,
                        &e_));
      for (int64_t i = 0; i < len; ++i) vals[i] -= 0.5f * grads[i];
      dk_shard_zero_grads(unit);
    }
    DLTensor* outs[1] = {&tw};
    OK(dk_shard_gather_full(unit, outs, 1, 0, &e_));
    for (int i = 0; i < 10; ++i) {
      double want = 0.1 * i;
      for (int step = 0; step < 3; ++step)
        want -= 0.5 * (0.1 * want * (n + 1) / 2.0 + 0.01 * i);
      if (fabs(w[i] - want) > 1e-5 * (fabs(want) > 1 ? fabs(want) : 1))
        die("sharded training", NULL);
    }
    dk_shard_destroy(unit);
  }
  /* 10: bool bytes other than 0 and 1 (this rank's) arrive as 1 (README). */
  {
    uint8_t flags[4] = {2, 255, 0, 1};
    int64_t four = 4, four_n = 4 * n;
    uint8_t* got = malloc(4 * n);
    DLTensor bin = view(flags, &four, kDLUInt, 1),
             bout = view(got, &four_n, kDLUInt, 1);
    OK(dk_group_all_gather(world, &bin, &bout, NULL, &e_));
    for (int j = 0; j < 4 * n; ++j)
      if (got[j] != (j % 4 == 2 ? 0 : 1)) die("all_gather bool", NULL);
    free(got);
  }
  OK(dk_group_barrier(world, NULL, &e_));
  dk_group_destroy(world);
  printf("rank %d (c): mixed-language checks passed\n", r);
  return 0;
}
