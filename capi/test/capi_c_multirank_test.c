/* Drives the C ABI end to end from plain C (c11, -pedantic -Werror), in every
 * rank of a real job: init, queries, every collective (blocking and async),
 * subgroups, the store, and misuse that must come back as a status with a
 * message naming the argument, never a crash. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "distkit/distkit.h"

static int rank_ = -1;
static int failures = 0;

/* dk_work_on_complete's callback: counts calls, keeps the last status. */
static atomic_int completions;
static atomic_int completed_status;
static void on_complete(void* arg, dk_status_t status) {
  (void)arg;
  atomic_store(&completed_status, status);
  atomic_fetch_add(&completions, 1);
}

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "rank %d: line %d: CHECK failed: %s\n", rank_, __LINE__, \
              #cond);                                                          \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

/* Checks that `status` is `code` and the error message contains `text`. */
static void expect_error(dk_status_t status, dk_error_t** err, dk_status_t code,
                         const char* text, int line) {
  const char* msg = *err != NULL ? dk_error_message(*err) : "(no error object)";
  if (status != code || *err == NULL || dk_error_code(*err) != code ||
      strstr(msg, text) == NULL) {
    fprintf(stderr,
            "rank %d: line %d: expected %d containing '%s', got %d: %s\n",
            rank_, line, code, text, status, msg);
    ++failures;
  }
  dk_error_free(*err);
  *err = NULL;
}
#define EXPECT_ERROR(call, code, text)           \
  do {                                           \
    dk_error_t* e_ = NULL;                       \
    dk_status_t s_ = (call);                     \
    expect_error(s_, &e_, code, text, __LINE__); \
  } while (0)
#define OK(call)                                                            \
  do {                                                                      \
    dk_error_t* e_ = NULL;                                                  \
    dk_status_t s_ = (call);                                                \
    if (s_ != DK_OK) {                                                      \
      fprintf(stderr, "rank %d: line %d: %s failed: %s\n", rank_, __LINE__, \
              #call, e_ != NULL ? dk_error_message(e_) : "?");              \
      ++failures;                                                           \
    }                                                                       \
    dk_error_free(e_);                                                      \
  } while (0)

typedef struct {
  DLTensor t;
  int64_t shape[2];
  int64_t strides[2];
} tensor_t;

static DLTensor* view(tensor_t* v, void* data, int64_t n, uint8_t code,
                      uint8_t bits) {
  memset(v, 0, sizeof(*v));
  v->shape[0] = n;
  v->t.data = data;
  v->t.device.device_type = kDLCPU;
  v->t.ndim = 1;
  v->t.dtype.code = code;
  v->t.dtype.bits = bits;
  v->t.dtype.lanes = 1;
  v->t.shape = v->shape;
  return &v->t;
}

/* collect_results on `world` of n ranks: 9 items round robin, padded with
 * empty (None) items, gathered in order on rank 0 alone, on "cpu" and "gpu"
 * (through the group on a CPU-only machine); "tpu" refused. */
static void check_collect_results(dk_group_t* world, int n) {
  const int64_t size = 9;
  dk_bytes_t part[9];
  char text[9][8];
  size_t k = 0;
  for (int64_t index = rank_; k * n < (size_t)(size + n - 1) / n * n && k < 9;
       index += n, ++k) {
    snprintf(text[k], sizeof(text[k]), "r%d", (int)index);
    part[k].data = text[k];
    part[k].size = index < size ? strlen(text[k]) : 0;
  }
  const char* devices[2] = {"cpu", "gpu"};
  for (int d = 0; d < 2; ++d) {
    dk_bytes_t* items = NULL;
    size_t count = 0;
    OK(dk_group_collect_results(world, part, k, size, devices[d], NULL, &items,
                                &count, &e_));
    if (rank_ == 0) {
      CHECK(count == (size_t)size);
      for (size_t i = 0; i < count; ++i) {
        char want[8];
        snprintf(want, sizeof(want), "r%d", (int)i);
        CHECK(items[i].size == strlen(want) &&
              memcmp(items[i].data, want, items[i].size) == 0);
      }
    } else {
      CHECK(items == NULL && count == 0);
    }
    dk_free(items);
  }
  dk_bytes_t* items = NULL;
  size_t count = 0;
  EXPECT_ERROR(dk_group_collect_results(world, part, k, size, "tpu", NULL,
                                        &items, &count, &e_),
               DK_UNIMPLEMENTED, "device must be cpu, gpu or npu");
}

int main(void) {
  dk_error_t* err = NULL;
  tensor_t a, b;
  int32_t major = -1, minor = -1;

  dk_get_version(&major, &minor);
  CHECK(major == DK_ABI_MAJOR && minor == DK_ABI_MINOR);
  OK(dk_init_version(DK_ABI_MAJOR, DK_ABI_MINOR, &e_));
  EXPECT_ERROR(dk_init_version(DK_ABI_MAJOR + 1, 0, &e_),
               DK_FAILED_PRECONDITION, "ABI mismatch");

  /* Not distributed yet: mmengine's answers, and clear errors. */
  CHECK(dk_is_distributed() == 0);
  CHECK(dk_group_rank(NULL) == 0 && dk_group_size(NULL) == 1);
  CHECK(dk_group_backend(NULL) == NULL);
  {
    float x = 1.0f;
    EXPECT_ERROR(dk_group_all_reduce(NULL, view(&a, &x, 1, kDLFloat, 32),
                                     DK_OP_SUM, NULL, &e_),
                 DK_FAILED_PRECONDITION, "call dk_init first");
  }

  dk_group_t* world = NULL;
  dk_init_config_t config;
  dk_init_config_init(&config);
  config.timeout_ms = 60000;
  EXPECT_ERROR(dk_init("k8s", &config, &world, &e_), DK_INVALID_ARGUMENT,
               "Invalid launcher type: k8s");
  EXPECT_ERROR(dk_init("pytorch", &config, NULL, &e_), DK_INVALID_ARGUMENT,
               "world_out is NULL");
  OK(dk_init("pytorch", &config, &world, &e_));
  if (world == NULL) return 1;
  rank_ = dk_group_rank(world);
  const int n = dk_group_size(world);
  CHECK(dk_is_distributed() == 1);
  CHECK(rank_ == atoi(getenv("RANK")) && n == atoi(getenv("WORLD_SIZE")));
  CHECK(strcmp(dk_group_backend(world), "gloo") == 0);
  CHECK(strcmp(dk_group_name(NULL), "world") == 0);

  /* all_reduce: float sum, int64 mean (truncates), int32 max. */
  {
    float f[3] = {1.0f * rank_, 2.0f, 0.5f};
    OK(dk_group_all_reduce(world, view(&a, f, 3, kDLFloat, 32), DK_OP_SUM, NULL,
                           &e_));
    CHECK(f[0] == n * (n - 1) / 2.0f && f[1] == 2.0f * n && f[2] == 0.5f * n);
    int64_t m[2] = {1 + 2 * rank_, 7};
    OK(dk_group_all_reduce(NULL, view(&a, m, 2, kDLInt, 64), DK_OP_MEAN, NULL,
                           &e_));
    int64_t sum = 0;
    for (int r = 0; r < n; ++r) sum += 1 + 2 * r;
    CHECK(m[0] == sum / n && m[1] == 7);
    int32_t mx = 100 - rank_;
    OK(dk_group_all_reduce(world, view(&a, &mx, 1, kDLInt, 32), DK_OP_MIN, NULL,
                           &e_));
    CHECK(mx == 100 - (n - 1));
  }
  /* Asynchronous: several in flight, then test and wait. */
  {
    double d[4][1000];
    dk_work_t* works[4];
    for (int k = 0; k < 4; ++k) {
      for (int i = 0; i < 1000; ++i) d[k][i] = k + rank_;
      OK(dk_group_all_reduce(world, view(&a, d[k], 1000, kDLFloat, 64),
                             DK_OP_SUM, &works[k], &e_));
    }
    atomic_store(&completions, 0);
    for (int k = 0; k < 4; ++k) {
      OK(dk_work_on_complete(works[k], on_complete, NULL, &e_));
    }
    for (int k = 0; k < 4; ++k) {
      OK(dk_work_wait(works[k], 60000, &e_));
      dk_work_state_t state = -1;
      OK(dk_work_test(works[k], &state, &e_));
      CHECK(state == DK_WORK_SUCCEEDED);
      CHECK(d[k][999] == n * k + n * (n - 1) / 2.0);
    }
    /* The callbacks run on the group's worker, after waiters see the result:
     * wait for the last of them (bounded). */
    time_t until = time(NULL) + 60;
    while (atomic_load(&completions) < 4 && time(NULL) < until) {
    }
    CHECK(atomic_load(&completions) == 4);
    CHECK(atomic_load(&completed_status) == DK_OK);
    /* On a finished work: at once, on this thread. */
    OK(dk_work_on_complete(works[0], on_complete, NULL, &e_));
    CHECK(atomic_load(&completions) == 5);
    EXPECT_ERROR(dk_work_on_complete(works[0], NULL, NULL, &e_),
                 DK_INVALID_ARGUMENT, "callback is NULL");
    for (int k = 0; k < 4; ++k) dk_work_destroy(works[k]);
  }
  /* broadcast from the last rank, all_gather, reduce_scatter, gather, scatter.
   */
  {
    int32_t v[5];
    for (int i = 0; i < 5; ++i) v[i] = rank_ * 10 + i;
    OK(dk_group_broadcast(world, view(&a, v, 5, kDLInt, 32), n - 1, NULL, &e_));
    CHECK(v[4] == (n - 1) * 10 + 4);
    float mine[2] = {(float)rank_, (float)rank_ + 0.5f};
    float* all = calloc((size_t)n * 2, sizeof(float));
    OK(dk_group_all_gather(world, view(&a, mine, 2, kDLFloat, 32),
                           view(&b, all, 2 * n, kDLFloat, 32), NULL, &e_));
    for (int r = 0; r < n; ++r)
      CHECK(all[2 * r] == r && all[2 * r + 1] == r + 0.5f);
    float part[2] = {0, 0};
    OK(dk_group_reduce_scatter(world, view(&a, all, 2 * n, kDLFloat, 32),
                               view(&b, part, 2, kDLFloat, 32), DK_OP_SUM, NULL,
                               &e_));
    CHECK(part[0] == (float)n * rank_ && part[1] == (float)n * (rank_ + 0.5f));
    memset(all, 0, sizeof(float) * 2 * n);
    OK(dk_group_gather(world, view(&a, mine, 2, kDLFloat, 32),
                       rank_ == 0 ? view(&b, all, 2 * n, kDLFloat, 32) : NULL,
                       0, NULL, &e_));
    if (rank_ == 0) CHECK(all[2 * (n - 1)] == n - 1);
    float back[2] = {-1, -1};
    OK(dk_group_scatter(world,
                        rank_ == 0 ? view(&a, all, 2 * n, kDLFloat, 32) : NULL,
                        view(&b, back, 2, kDLFloat, 32), 0, NULL, &e_));
    CHECK(back[0] == rank_ && back[1] == rank_ + 0.5f);
    free(all);
  }
  /* all_to_all with uneven splits: rank r sends d + 1 int64s to rank d. */
  {
    int64_t in_splits[8], out_splits[8], in[64], out[64];
    int64_t k = 0;
    for (int d = 0; d < n; ++d) {
      in_splits[d] = d + 1;
      out_splits[d] = rank_ + 1;
      for (int j = 0; j <= d; ++j) in[k++] = 100 * rank_ + d;
    }
    OK(dk_group_all_to_all(world, view(&a, in, k, kDLInt, 64), in_splits,
                           view(&b, out, (int64_t)n * (rank_ + 1), kDLInt, 64),
                           out_splits, (size_t)n, NULL, &e_));
    for (int s = 0; s < n; ++s) CHECK(out[s * (rank_ + 1)] == 100 * s + rank_);
  }
  OK(dk_group_barrier(world, NULL, &e_));
  /* send / recv around a ring. */
  if (n > 1) {
    int32_t to_right[3] = {rank_, rank_, rank_}, from_left[3] = {-1, -1, -1};
    dk_work_t* send = NULL;
    OK(dk_group_send(world, view(&a, to_right, 3, kDLInt, 32), (rank_ + 1) % n,
                     5, &send, &e_));
    OK(dk_group_recv(world, view(&b, from_left, 3, kDLInt, 32),
                     (rank_ + n - 1) % n, 5, NULL, &e_));
    OK(dk_work_wait(send, 60000, &e_));
    dk_work_destroy(send);
    CHECK(from_left[2] == (rank_ + n - 1) % n);
  }
  /* A subgroup of the even ranks. */
  {
    int32_t evens[8];
    size_t ne = 0;
    for (int r = 0; r < n; r += 2) evens[ne++] = r;
    dk_group_t* even = NULL;
    OK(dk_group_new(world, evens, ne, &even, &e_));
    int64_t x = rank_;
    if (rank_ % 2 == 0) {
      OK(dk_group_all_reduce(even, view(&a, &x, 1, kDLInt, 64), DK_OP_SUM, NULL,
                             &e_));
      int64_t want = 0;
      for (size_t i = 0; i < ne; ++i) want += evens[i];
      CHECK(x == want && dk_group_rank(even) == rank_ / 2);
    } else {
      EXPECT_ERROR(dk_group_all_reduce(even, view(&a, &x, 1, kDLInt, 64),
                                       DK_OP_SUM, NULL, &e_),
                   DK_FAILED_PRECONDITION, "is not a member of group");
      CHECK(dk_group_rank(even) == -1);
    }
    dk_group_destroy(even);
  }

  /* Objects of different sizes, a broadcast list, the seed, coalesced tensors.
   */
  {
    char mine[64];
    const size_t len = (size_t)(rank_ * 7 + 1);
    memset(mine, 'a' + rank_, len);
    dk_bytes_t* items = NULL;
    size_t count = 0;
    OK(dk_group_all_gather_object(world, mine, len, &items, &count, &e_));
    CHECK(count == (size_t)n);
    for (size_t r = 0; r < count; ++r) {
      CHECK(items[r].size == r * 7 + 1 &&
            ((const char*)items[r].data)[0] == (char)('a' + r));
    }
    dk_free(items);
    OK(dk_group_gather_object(world, mine, len, n - 1, &items, &count, &e_));
    CHECK(rank_ == n - 1 ? (count == (size_t)n && items[0].size == 1)
                         : (items == NULL && count == 0));
    dk_free(items);
    dk_bytes_t list[2] = {{"first", 5}, {"", 0}};
    OK(dk_group_broadcast_object_list(world, rank_ == 0 ? list : NULL,
                                      rank_ == 0 ? 2 : 0, 0, &items, &count,
                                      &e_));
    CHECK(count == 2 && items[0].size == 5 &&
          memcmp(items[0].data, "first", 5) == 0 && items[1].size == 0);
    dk_free(items);
    int32_t seed = -1, seeds[8];
    OK(dk_group_sync_random_seed(world, &seed, &e_));
    OK(dk_group_all_gather(world, view(&a, &seed, 1, kDLInt, 32),
                           view(&b, seeds, n, kDLInt, 32), NULL, &e_));
    for (int r = 0; r < n; ++r) CHECK(seeds[r] == seed && seed >= 0);
    float big[1000];
    int64_t small[3];
    for (int i = 0; i < 1000; ++i) big[i] = (float)rank_;
    for (int i = 0; i < 3; ++i) small[i] = rank_ + i;
    tensor_t c;
    DLTensor* both[2] = {view(&a, big, 1000, kDLFloat, 32),
                         view(&c, small, 3, kDLInt, 64)};
    OK(dk_group_all_reduce_coalesced(world, both, 2, DK_OP_SUM, 1, -1, &e_));
    CHECK(big[999] == n * (n - 1) / 2.0f &&
          small[2] == n * (n - 1) / 2 + 2 * n);
  }
  check_collect_results(world, n);
  /* The local group: dk_init made it from distrun's layout (one node: every
   * rank); dk_init_local_group replaces it ("nodes" of two ranks when the
   * size is even), and then exists. Global ranks of its members. */
  {
    dk_group_t* local = NULL;
    OK(dk_local_group(&local, &e_));
    CHECK(local != NULL && dk_group_rank(local) == rank_ &&
          dk_group_size(local) == n);
    dk_group_destroy(local);
    const int per_node = n % 2 == 0 ? 2 : n;
    OK(dk_init_local_group(rank_ / per_node, per_node, &e_));
    OK(dk_local_group(&local, &e_));
    CHECK(local != NULL && dk_group_rank(local) == rank_ % per_node &&
          dk_group_size(local) == per_node);
    const int first = rank_ / per_node * per_node;
    CHECK(dk_group_global_rank(local, 0) == first &&
          dk_group_global_rank(local, per_node - 1) == first + per_node - 1 &&
          dk_group_global_rank(local, per_node) == -1 &&
          dk_group_global_rank(local, -1) == -1 &&
          dk_group_global_rank(NULL, n - 1) == n - 1);
    dk_group_destroy(local);
    EXPECT_ERROR(dk_init_local_group(0, n, &e_), DK_FAILED_PRECONDITION,
                 "already exists");
  }

  /* modelopt's ParallelState: data = the world, tensor = unused. */
  {
    dk_parallel_state_t* state = NULL;
    char* text = NULL;
    OK(dk_parallel_state_create(NULL, DK_GROUP_UNUSED, DK_GROUP_UNUSED, &state,
                                &e_));
    CHECK(dk_parallel_state_rank(state, DK_PARALLEL_DATA) == rank_);
    CHECK(dk_parallel_state_size(state, DK_PARALLEL_DATA) == n);
    CHECK(dk_parallel_state_rank(state, DK_PARALLEL_TENSOR) == -1);
    CHECK(dk_parallel_state_size(state, DK_PARALLEL_EXPERT) == -1);
    OK(dk_parallel_state_describe(state, &text, &e_));
    CHECK(text != NULL &&
          strstr(text, "data_parallel_group: group: None, initialized: True") !=
              NULL);
    CHECK(text != NULL && strstr(text,
                                 "tensor_parallel_group: group: -1, "
                                 "initialized: False, world size: -1") != NULL);
    dk_free(text);
    dk_parallel_state_destroy(state);
  }

  /* Misuse: each is a status naming the argument. */
  {
    float f[6] = {0};
    EXPECT_ERROR(dk_group_all_reduce(world, NULL, DK_OP_SUM, NULL, &e_),
                 DK_INVALID_ARGUMENT, "data: tensor is NULL");
    EXPECT_ERROR(
        dk_group_all_reduce(world, view(&a, f, 6, kDLFloat, 32), 42, NULL, &e_),
        DK_INVALID_ARGUMENT, "unknown reduce op code 42");
    EXPECT_ERROR(dk_group_all_reduce(world, view(&a, f, 6, kDLFloat, 32),
                                     DK_OP_BXOR, NULL, &e_),
                 DK_INVALID_ARGUMENT, "float32");
    view(&a, f, 6, kDLFloat, 32);
    a.t.ndim = 2;
    a.shape[0] = 3;
    a.shape[1] = 2;
    a.strides[0] = 1;
    a.strides[1] = 3; /* a transpose */
    a.t.strides = a.strides;
    EXPECT_ERROR(dk_group_all_reduce(world, &a.t, DK_OP_SUM, NULL, &e_),
                 DK_INVALID_ARGUMENT, "not contiguous");
    view(&a, f, 6, kDLFloat, 32);
    a.t.device.device_type = kDLCUDA;
    EXPECT_ERROR(dk_group_all_reduce(world, &a.t, DK_OP_SUM, NULL, &e_),
                 DK_INVALID_ARGUMENT, "works on cpu tensors");
    EXPECT_ERROR(dk_group_all_reduce(world, view(&a, f, 6, kDLComplex, 64),
                                     DK_OP_SUM, NULL, &e_),
                 DK_INVALID_ARGUMENT, "unsupported DLPack dtype");
    EXPECT_ERROR(dk_group_all_gather(world, view(&a, f, 2, kDLFloat, 32),
                                     view(&b, f, 1, kDLFloat, 32), NULL, &e_),
                 DK_INVALID_ARGUMENT, "output has 1 elements");
    EXPECT_ERROR(
        dk_group_broadcast(world, view(&a, f, 1, kDLFloat, 32), n, NULL, &e_),
        DK_INVALID_ARGUMENT, "root");
    EXPECT_ERROR(dk_group_new(world, NULL, 2, NULL, &e_), DK_INVALID_ARGUMENT,
                 "out is NULL");
    EXPECT_ERROR(dk_work_wait(NULL, 0, &e_), DK_INVALID_ARGUMENT,
                 "work is NULL");
    EXPECT_ERROR(dk_store_set(NULL, "k", "v", 1, &e_), DK_INVALID_ARGUMENT,
                 "store is NULL");
    /* Different element counts across ranks: an error on every rank. */
    if (n > 1) {
      EXPECT_ERROR(
          dk_group_all_reduce(world, view(&a, f, 1 + rank_ % 2, kDLFloat, 32),
                              DK_OP_SUM, NULL, &e_),
          DK_INVALID_ARGUMENT, "ranks disagree");
    }
    /* The status is returned even without an error object. */
    CHECK(dk_group_all_reduce(world, NULL, DK_OP_SUM, NULL, NULL) ==
          DK_INVALID_ARGUMENT);
  }

  /* A store of this rank's own: every operation, and a wrong token. */
  {
    dk_store_config_t sc;
    dk_store_config_init(&sc);
    sc.address = "127.0.0.1:0";
    sc.token = "secret";
    sc.timeout_ms = 2000;
    dk_store_t* store = NULL;
    OK(dk_store_serve(&sc, &store, &e_));
    if (store != NULL) {
      void* value = NULL;
      size_t size = 0;
      int64_t count = 0;
      int32_t flag = 0;
      const char* keys[2] = {"k", "n"};
      OK(dk_store_set(store, "k", "hello", 5, &e_));
      OK(dk_store_get(store, "k", &value, &size, &e_));
      CHECK(size == 5 && memcmp(value, "hello", 5) == 0);
      dk_free(value);
      OK(dk_store_add(store, "n", 3, &count, &e_));
      OK(dk_store_add(store, "n", 4, &count, &e_));
      CHECK(count == 7);
      OK(dk_store_wait(store, keys, 2, 1000, &e_));
      OK(dk_store_check(store, keys, 2, &flag, &e_));
      CHECK(flag == 1);
      OK(dk_store_num_keys(store, &count, &e_));
      CHECK(count == 2);
      OK(dk_store_delete_key(store, "k", &flag, &e_));
      CHECK(flag == 1);
      EXPECT_ERROR(dk_store_get(store, "k", &value, &size, &e_),
                   DK_DEADLINE_EXCEEDED, "\"k\"");
      dk_store_config_t bad = sc;
      bad.address = dk_store_address(store);
      bad.token = "wrong";
      dk_store_t* intruder = NULL;
      OK(dk_store_connect(&bad, &intruder, &e_));
      EXPECT_ERROR(dk_store_set(intruder, "k", "x", 1, &e_), DK_UNAUTHENTICATED,
                   "wrong job token");
      dk_store_destroy(intruder);
      /* Timeouts of 0 or less are the defaults (a deadline of "now" failed
       * every call, the handshake included). */
      dk_store_config_t zero = sc;
      zero.address = dk_store_address(store);
      zero.timeout_ms = 0;
      zero.connect_timeout_ms = -1;
      dk_store_t* patient = NULL;
      OK(dk_store_connect(&zero, &patient, &e_));
      if (patient != NULL) {
        OK(dk_store_add(patient, "n", 1, &count, &e_));
        CHECK(count == 8);
        dk_store_destroy(patient);
      }
      dk_store_destroy(store);
    }
  }
  /* The job's store has the address of its server ("host:port"). */
  {
    dk_store_t* job = NULL;
    OK(dk_default_store(&job, &e_));
    if (job != NULL) {
      const char* address = dk_store_address(job);
      CHECK(address != NULL && strchr(address, ':') != NULL);
      dk_store_destroy(job);
    }
  }

  /* Abort: every rank aborts a group of its own; later calls fail at once. */
  {
    int32_t all[8];
    for (int r = 0; r < n; ++r) all[r] = r;
    dk_group_t* g = NULL;
    OK(dk_group_new(world, all, (size_t)n, &g, &e_));
    if (g == NULL) return 1; /* NULL would mean the default group below */
    dk_group_abort(g);
    float x = 1;
    EXPECT_ERROR(dk_group_all_reduce(g, view(&a, &x, 1, kDLFloat, 32),
                                     DK_OP_SUM, NULL, &e_),
                 DK_FAILED_PRECONDITION, "aborted");
    EXPECT_ERROR(dk_group_async_error(g, &e_), DK_CANCELLED, "aborted");
    dk_group_destroy(g);
    /* A destroyed handle is a clean error, not a use of freed memory. */
    EXPECT_ERROR(dk_group_barrier(g, NULL, &e_), DK_FAILED_PRECONDITION,
                 "handle was destroyed");
    CHECK(dk_group_rank(g) == -1);
  }
  OK(dk_group_async_error(world, &e_));

  /* Devices: a host copy works; a CUDA device this machine lacks is named. */
  {
    DLDevice dev;
    dk_get_device(&dev);
    CHECK(dev.device_type == kDLCPU || dev.device_type == kDLCUDA);
    float src[3] = {1, 2, 3}, dst[3] = {0, 0, 0};
    tensor_t s, d;
    OK(dk_tensor_copy(view(&s, src, 3, kDLFloat, 32),
                      view(&d, dst, 3, kDLFloat, 32), &e_));
    CHECK(dst[2] == 3);
    EXPECT_ERROR(dk_tensor_copy(view(&s, src, 3, kDLFloat, 32),
                                view(&d, dst, 2, kDLFloat, 32), &e_),
                 DK_INVALID_ARGUMENT, "tensor_copy");
    if (dev.device_type == kDLCPU) {
      view(&d, dst, 3, kDLFloat, 32)->device.device_type = kDLCUDA;
      EXPECT_ERROR(dk_tensor_copy(view(&s, src, 3, kDLFloat, 32), &d.t, &e_),
                   DK_FAILED_PRECONDITION, "cuda:0");
    }
  }

  OK(dk_group_barrier(world, NULL, &e_));
  /* dk_shutdown forgets the default group, but the world's handle stays
   * valid and a call through it is still the group's: collect_results
   * gathers every rank's part (it once answered each rank with its own). */
  dk_shutdown();
  CHECK(dk_is_distributed() == 0);
  check_collect_results(world, n);
  OK(dk_group_barrier(world, NULL, &e_));
  dk_group_destroy(world);
  printf("rank %d: C ABI test %s (%d failures)\n", rank_,
         failures ? "FAILED" : "passed", failures);
  (void)err;
  return failures ? 1 : 0;
}
