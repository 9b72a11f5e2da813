/* Sharded units through the C ABI, in every rank of a real job: a linear
 * model (float32 weights whose count needs padding, a float64 bias: two flat
 * buffers) trained 5 SGD steps under FULL_SHARD, SHARD_GRAD_OP and NO_SHARD,
 * with prefetch and no_sync, must equal training alone on the global batch;
 * then state dicts (full, from rank 0 alone, sharded round trip) and misuse
 * answered with a status, never a crash or a wait. Frozen parameters (ABI
 * 0.13) in a flat buffer of their own, without a gradient; the sized config
 * initializers write no byte past the caller's struct, and the unsized ones
 * the struct of ABI 0.12. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "distkit/distkit.h"
#include "testing/c/host_tensor.h"
#include "testing/c/rank_check.h"

#define NW 7    /* weights */
#define LOCAL 3 /* samples per rank */
#define STEPS 5
#define LR 0.05

static int size_;

static double x(int s, int step, int j) {
  return cos(0.3 * s + 0.2 * step + j);
}
static double y(int s, int step) { return sin(0.5 * s - 0.1 * step); }

/* Gradient of the mean squared error over samples [first, first + n). */
static void grads(const float* w, double b, int first, int n, int step,
                  double* gw, double* gb) {
  memset(gw, 0, sizeof(double) * NW);
  *gb = 0;
  for (int s = first; s < first + n; ++s) {
    double pred = b;
    for (int j = 0; j < NW; ++j) pred += w[j] * x(s, step, j);
    const double d = (pred - y(s, step)) / n;
    for (int j = 0; j < NW; ++j) gw[j] += d * x(s, step, j);
    *gb += d;
  }
}

/* Trains with `strategy`; `accumulate` micro-batches per step (no_sync for
 * all but the last). Returns the unit for the state-dict checks. */
static dk_shard_t* train(dk_group_t* world, int strategy, int accumulate,
                         float* w_out, double* b_out) {
  float w[NW];
  double b = dk_test_rank == 0 ? 0.25 : 9.0; /* rank 0's values win */
  for (int j = 0; j < NW; ++j)
    w[j] = dk_test_rank == 0 ? 0.1f * (float)j : 7.0f;
  float ref_w[NW];
  double ref_b = 0.25;
  for (int j = 0; j < NW; ++j) ref_w[j] = 0.1f * (float)j;
  int64_t nw = NW, nb = 1;
  DLTensor tw = dk_test_host_tensor(w, &nw, 1, kDLFloat, 32),
           tb = dk_test_host_tensor(&b, &nb, 1, kDLFloat, 64);
  DLTensor* params[2] = {&tw, &tb};
  const char* names[2] = {"w", "b"};
  dk_shard_config_t config;
  dk_shard_config_init(&config);
  config.strategy = strategy;
  config.sync_module_states = 1;
  dk_shard_t* unit = NULL;
  DK_TEST_OK(dk_shard_create(world, params, 2, names, &config, &unit, &e_));
  dk_test_check(dk_shard_num_flat(unit) == 2, "two flat buffers");
  for (int step = 0; step < STEPS; ++step) {
    for (int micro = 0; micro < accumulate; ++micro) {
      const int batch = step * accumulate + micro;
      dk_shard_set_require_sync(unit, micro == accumulate - 1);
      DK_TEST_OK(dk_shard_unshard_start(unit, &e_)); /* prefetch */
      DK_TEST_OK(dk_shard_unshard_wait(unit, &e_));
      float* fw = NULL;
      double* fb = NULL;
      DK_TEST_OK(dk_shard_full_param(unit, 0, (void**)&fw, &e_));
      DK_TEST_OK(dk_shard_full_param(unit, 1, (void**)&fb, &e_));
      double gw[NW], gb;
      grads(fw, *fb, dk_test_rank * LOCAL, LOCAL, batch, gw, &gb);
      if (strategy == DK_SHARD_FULL_SHARD)
        DK_TEST_OK(dk_shard_reshard(unit, &e_));
      float gwf[NW];
      for (int j = 0; j < NW; ++j) gwf[j] = (float)gw[j];
      DLTensor g0 = dk_test_host_tensor(gwf, &nw, 1, kDLFloat, 32),
               g1 = dk_test_host_tensor(&gb, &nb, 1, kDLFloat, 64);
      DK_TEST_OK(dk_shard_accumulate_grad(unit, 0, &g0, &e_));
      DK_TEST_OK(dk_shard_accumulate_grad(unit, 1, &g1, &e_));
      if ((step + micro) % 2 == 0) {
        DK_TEST_OK(dk_shard_reduce_grads(unit, &e_));
      } else { /* the two-halves form: start, other work, wait */
        DK_TEST_OK(dk_shard_reduce_grads_start(unit, &e_));
        DK_TEST_OK(dk_shard_reshard(unit, &e_));
        DK_TEST_OK(dk_shard_reduce_grads_wait(unit, &e_));
      }
      DK_TEST_OK(dk_shard_reshard(unit, &e_));
    }
    for (int k = 0; k < dk_shard_num_flat(unit); ++k) {
      void *data, *grad;
      int64_t n;
      dk_dtype_t dt;
      DK_TEST_OK(dk_shard_local(unit, k, &data, &grad, &n, &dt, &e_));
      for (int64_t i = 0; i < n; ++i) {
        if (dt == DK_FLOAT32)
          ((float*)data)[i] -= (float)(LR * ((float*)grad)[i]);
        else
          ((double*)data)[i] -= LR * ((double*)grad)[i];
      }
    }
    dk_shard_zero_grads(unit);
    /* The reference: alone, on the global batch. */
    double sw[NW] = {0}, sb = 0;
    for (int micro = 0; micro < accumulate; ++micro) {
      double gw[NW], gb;
      grads(ref_w, ref_b, 0, size_ * LOCAL, step * accumulate + micro, gw, &gb);
      for (int j = 0; j < NW; ++j) sw[j] += gw[j];
      sb += gb;
    }
    for (int j = 0; j < NW; ++j) ref_w[j] -= (float)(LR * (float)sw[j]);
    ref_b -= LR * sb;
  }
  int64_t nw2 = NW, nb2 = 1;
  DLTensor ow = dk_test_host_tensor(w_out, &nw2, 1, kDLFloat, 32),
           ob = dk_test_host_tensor(b_out, &nb2, 1, kDLFloat, 64);
  DLTensor* outs[2] = {&ow, &ob};
  DK_TEST_OK(dk_shard_gather_full(unit, outs, 2, 0, &e_));
  double diff = 0, norm = 0;
  for (int j = 0; j < NW; ++j) {
    diff += (w_out[j] - ref_w[j]) * (w_out[j] - ref_w[j]);
    norm += ref_w[j] * ref_w[j];
  }
  char what[160];
  snprintf(what, sizeof(what),
           "strategy %d x%d: weights equal training alone (%.2e)", strategy,
           accumulate, sqrt(diff / norm));
  dk_test_check(sqrt(diff / norm) <= 1e-5, what);
  dk_test_check(fabs(*b_out - ref_b) <= 1e-5 * fabs(ref_b),
                "bias equals the reference");
  double moved = 0;
  for (int j = 0; j < NW; ++j) moved += fabs(ref_w[j] - 0.1f * (float)j);
  dk_test_check(moved > 1e-3, "training moved the weights");
  return unit;
}

/* Each dk_X_init_sized writes `size` bytes and no more; each dk_X_init the
 * struct as ABI 0.12 declared it (for the shard config: up to `frozen`). */
#define THROUGH(T, last) (offsetof(T, last) + sizeof(((T*)0)->last))
#define CHECK_INIT(T, sized, unsized, last_012, what)                    \
  do {                                                                   \
    unsigned char buf[sizeof(T) + 16];                                   \
    const size_t small = THROUGH(T, last_012);                           \
    memset(buf, 0xAB, sizeof buf);                                       \
    sized((T*)buf, offsetof(T, struct_size) + sizeof(size_t));           \
    dk_test_check(((T*)buf)->struct_size == sizeof(size_t) &&            \
                      buf[sizeof(size_t)] == 0xAB,                       \
                  what ": _init_sized of struct_size alone");            \
    memset(buf, 0xAB, sizeof buf);                                       \
    unsized((T*)buf);                                                    \
    dk_test_check(((T*)buf)->struct_size == small && buf[small] == 0xAB, \
                  what ": _init writes the ABI 0.12 struct only");       \
    memset(buf, 0xAB, sizeof buf);                                       \
    sized((T*)buf, sizeof(T));                                           \
    dk_test_check(                                                       \
        ((T*)buf)->struct_size == sizeof(T) && buf[sizeof(T)] == 0xAB,   \
        what ": _init_sized of the whole struct");                       \
  } while (0)

static void config_inits(void) {
  CHECK_INIT(dk_store_config_t, dk_store_config_init_sized,
             dk_store_config_init, connect_timeout_ms, "store config");
  CHECK_INIT(dk_init_config_t, dk_init_config_init_sized, dk_init_config_init,
             connect_timeout_ms, "init config");
  CHECK_INIT(dk_group_options_t, dk_group_options_init_sized,
             dk_group_options_init, connect_timeout_ms, "group options");
  CHECK_INIT(dk_reducer_config_t, dk_reducer_config_init_sized,
             dk_reducer_config_init, comm_hook, "reducer config");
  CHECK_INIT(dk_shard_config_t, dk_shard_config_init_sized,
             dk_shard_config_init, replicate_group, "shard config");
  /* The defaults reach a struct cut short, and the whole struct's
   * `frozen` starts NULL. */
  dk_shard_config_t c;
  memset(&c, 0xAB, sizeof c);
  dk_shard_config_init_sized(&c, sizeof c);
  dk_test_check(c.strategy == DK_SHARD_FULL_SHARD &&
                    c.param_dtype == DK_DTYPE_UNSET && c.frozen == NULL,
                "shard config defaults");
}

/* w (float32, trainable), f (float32, frozen), v (float32, trainable): w and
 * v in flat 0, f alone in flat 1, which has no gradient. Through
 * dk_shard_config_init (ABI 0.12) `frozen` is not read: one flat. */
static void frozen_params(dk_group_t* world) {
  float w[5] = {1, 2, 3, 4, 5}, f[3] = {10, 11, 12}, v[2] = {-1, -2};
  int64_t nw = 5, nf = 3, nv = 2;
  DLTensor tw = dk_test_host_tensor(w, &nw, 1, kDLFloat, 32),
           tf = dk_test_host_tensor(f, &nf, 1, kDLFloat, 32),
           tv = dk_test_host_tensor(v, &nv, 1, kDLFloat, 32);
  DLTensor* params[3] = {&tw, &tf, &tv};
  const char* names[3] = {"w", "f", "v"};
  const int32_t frozen[3] = {0, 1, 0};
  dk_shard_config_t config;
  dk_shard_config_init_sized(&config, sizeof config);
  config.frozen = frozen;
  dk_shard_t* unit = NULL;
  DK_TEST_OK(dk_shard_create(world, params, 3, names, &config, &unit, &e_));
  dk_test_check(dk_shard_num_flat(unit) == 2, "frozen: two flat buffers");
  void *data = NULL, *grad = (void*)1;
  int64_t numel = 0;
  dk_dtype_t dtype;
  DK_TEST_OK(dk_shard_local(unit, 1, &data, &grad, &numel, &dtype, &e_));
  dk_test_check(
      data != NULL && grad == NULL && numel == (3 + size_ - 1) / size_,
      "frozen: the frozen flat's shard has no gradient");
  DK_TEST_OK(dk_shard_local(unit, 0, &data, &grad, &numel, &dtype, &e_));
  dk_test_check(grad != NULL, "frozen: the trainable flat has one");
  dk_error_t* e = NULL;
  void* fg = NULL;
  dk_test_check(
      dk_shard_full_grad(unit, 1, &fg, &e) == DK_FAILED_PRECONDITION &&
          strstr(dk_error_message(e), "f is frozen") != NULL,
      "frozen: no full gradient for f");
  dk_error_free(e);
  float g[5] = {1, 1, 1, 1, 1};
  DLTensor tg = dk_test_host_tensor(g, &nw, 1, kDLFloat, 32);
  DK_TEST_OK(dk_shard_accumulate_grad(unit, 0, &tg, &e_));
  DK_TEST_OK(dk_shard_reduce_grads(unit, &e_));
  DK_TEST_OK(dk_shard_unshard(unit, &e_));
  float* full_f = NULL;
  DK_TEST_OK(dk_shard_full_param(unit, 1, (void**)&full_f, &e_));
  dk_test_check(full_f[0] == 10 && full_f[2] == 12, "frozen: f gathered");
  DK_TEST_OK(dk_shard_reshard(unit, &e_));
  dk_shard_destroy(unit);
  dk_shard_config_init(&config); /* ABI 0.12's struct: no frozen */
  config.frozen = frozen;        /* past struct_size: not read */
  DK_TEST_OK(dk_shard_create(world, params, 3, names, &config, &unit, &e_));
  dk_test_check(dk_shard_num_flat(unit) == 1,
                "frozen: ignored past an ABI 0.12 struct");
  dk_shard_destroy(unit);
}

int main(void) {
  dk_group_t* world = dk_test_init(NULL, 60000);
  size_ = dk_group_size(world);

  float w[NW];
  double b;
  const int strategies[3] = {DK_SHARD_FULL_SHARD, DK_SHARD_SHARD_GRAD_OP,
                             DK_SHARD_NO_SHARD};
  for (int s = 0; s < 3; ++s) {
    for (int acc = 1; acc <= 2; ++acc) {
      dk_shard_t* unit = train(world, strategies[s], acc, w, &b);
      if (s == 0 && acc == 1) {
        /* Memory: after reshard only the shards and their gradients stay. */
        const int64_t per = (NW + size_ - 1) / size_ * 4 + 8;
        dk_test_check(dk_shard_held_bytes(unit) == 2 * per, "only shards stay");
        dk_test_check(
            dk_shard_peak_held_bytes(unit) > dk_shard_held_bytes(unit),
            "the full buffers were counted while they lived");
        /* A sharded checkpoint, all ranks' shards gathered, loads again. */
        void *data, *grad;
        int64_t n;
        dk_dtype_t dt;
        DK_TEST_OK(dk_shard_local(unit, 0, &data, &grad, &n, &dt, &e_));
        float* all = calloc((size_t)(n * size_), sizeof(float));
        int64_t nn = n, total = n * size_;
        DLTensor mine = dk_test_host_tensor(data, &nn, 1, kDLFloat, 32),
                 gathered = dk_test_host_tensor(all, &total, 1, kDLFloat, 32);
        DK_TEST_OK(dk_group_all_gather(world, &mine, &gathered, NULL, &e_));
        double* bias = NULL;
        DK_TEST_OK(dk_shard_local(unit, 1, (void**)&bias, &grad, &n, &dt, &e_));
        double* biases = calloc((size_t)size_, sizeof(double));
        int64_t one = 1, sz = size_;
        DLTensor mb = dk_test_host_tensor(bias, &one, 1, kDLFloat, 64),
                 ab = dk_test_host_tensor(biases, &sz, 1, kDLFloat, 64);
        DK_TEST_OK(dk_group_all_gather(world, &mb, &ab, NULL, &e_));
        /* Overwrite the unit, then load the checkpoint back. */
        float junk[NW] = {0};
        double junk_b = -1;
        int64_t nw = NW;
        DLTensor jw = dk_test_host_tensor(junk, &nw, 1, kDLFloat, 32),
                 jb = dk_test_host_tensor(&junk_b, &one, 1, kDLFloat, 64);
        DLTensor* values[2] = {&jw, &jb};
        DK_TEST_OK(dk_shard_load_full(unit, values, 2, 0, &e_));
        /* rank0_only: rank 0's values reach every rank; the others pass
         * NULL entries, as the header allows. */
        float rw[NW];
        double rb = -2;
        for (int j = 0; j < NW; ++j) rw[j] = (float)(j + 1);
        DLTensor r0w = dk_test_host_tensor(rw, &nw, 1, kDLFloat, 32),
                 r0b = dk_test_host_tensor(&rb, &one, 1, kDLFloat, 64);
        DLTensor* rank0_values[2] = {&r0w, &r0b};
        DLTensor* none[2] = {NULL, NULL};
        DK_TEST_OK(dk_shard_load_full(
            unit, dk_test_rank == 0 ? rank0_values : none, 2, 1, &e_));
        int64_t offset, count;
        void *piece, *piece_grad;
        DK_TEST_OK(
            dk_shard_piece(unit, 0, &offset, &count, &piece, &piece_grad, &e_));
        int loaded = 1;
        for (int64_t i = 0; i < count; ++i)
          loaded &= ((float*)piece)[i] == (float)(offset + i + 1);
        dk_test_check(loaded, "rank0_only: rank 0's values on every rank");
        /* A tensor rank 0 cannot pass (not contiguous) is every rank's
         * error at once, not the others' timeout (60 s) in a broadcast;
         * whether the others pass no values or a NULL array they may not
         * (theirs are not read). */
        int64_t every_other = 2;
        r0w.strides = &every_other;
        for (size_t others_n = 0; others_n <= 2; others_n += 2) {
          struct timespec began, ended;
          clock_gettime(CLOCK_MONOTONIC, &began);
          dk_error_t* bad = NULL;
          const dk_status_t refused =
              dk_shard_load_full(unit, dk_test_rank == 0 ? rank0_values : NULL,
                                 dk_test_rank == 0 ? 2 : others_n, 1, &bad);
          clock_gettime(CLOCK_MONOTONIC, &ended);
          const double took = (double)(ended.tv_sec - began.tv_sec) +
                              1e-9 * (double)(ended.tv_nsec - began.tv_nsec);
          dk_test_check(
              refused == DK_INVALID_ARGUMENT && bad != NULL &&
                  strstr(dk_error_message(bad), "values[0]") != NULL &&
                  took < 20,
              "rank 0's bad value: every rank's error, promptly");
          dk_error_free(bad);
        }
        /* gather_full: an output rank 1 cannot lend (not contiguous) is its
         * own error; it still takes part in the gathers, so the others get
         * rank 0's values at once rather than wait for it to the timeout. */
        {
          float gw[NW];
          double gb = 0;
          DLTensor gwt = dk_test_host_tensor(gw, &nw, 1, kDLFloat, 32),
                   gbt = dk_test_host_tensor(&gb, &one, 1, kDLFloat, 64);
          if (dk_test_rank == 1) gwt.strides = &every_other;
          DLTensor* outs[2] = {&gwt, &gbt};
          struct timespec began, ended;
          clock_gettime(CLOCK_MONOTONIC, &began);
          dk_error_t* bad = NULL;
          const dk_status_t st = dk_shard_gather_full(unit, outs, 2, 0, &bad);
          clock_gettime(CLOCK_MONOTONIC, &ended);
          const double took = (double)(ended.tv_sec - began.tv_sec) +
                              1e-9 * (double)(ended.tv_nsec - began.tv_nsec);
          if (dk_test_rank == 1) {
            dk_test_check(st == DK_INVALID_ARGUMENT && bad != NULL &&
                              strstr(dk_error_message(bad), "outs[0]") != NULL,
                          "gather_full: a bad output is this rank's error");
          } else {
            int right = st == DK_OK && gb == -2;
            for (int j = 0; j < NW; ++j) right &= gw[j] == (float)(j + 1);
            dk_test_check(right, "gather_full: the others get the values");
          }
          dk_test_check(took < 20, "gather_full: nobody waits for rank 1");
          dk_error_free(bad);
        }
        DLTensor* saved = calloc((size_t)(2 * size_), sizeof(DLTensor));
        int64_t* shapes = calloc((size_t)(2 * size_), sizeof(int64_t));
        const DLTensor** ptrs = calloc((size_t)(2 * size_), sizeof(DLTensor*));
        for (int r = 0; r < size_; ++r) {
          shapes[r] = nn;
          saved[r] =
              dk_test_host_tensor(all + r * nn, &shapes[r], 1, kDLFloat, 32);
          shapes[size_ + r] = 1;
          saved[size_ + r] = dk_test_host_tensor(biases + r, &shapes[size_ + r],
                                                 1, kDLFloat, 64);
          ptrs[r] = &saved[r];
          ptrs[size_ + r] = &saved[size_ + r];
        }
        DK_TEST_OK(
            dk_shard_load_sharded(unit, size_, ptrs, (size_t)(2 * size_), &e_));
        float w2[NW];
        double b2;
        DLTensor ow = dk_test_host_tensor(w2, &nw, 1, kDLFloat, 32),
                 ob = dk_test_host_tensor(&b2, &one, 1, kDLFloat, 64);
        DLTensor* outs[2] = {&ow, &ob};
        DK_TEST_OK(dk_shard_gather_full(unit, outs, 2, 1, &e_));
        if (dk_test_rank == 0)
          dk_test_check(memcmp(w, w2, sizeof(w)) == 0 && b2 == b,
                        "a sharded checkpoint round-trips exactly");
        /* Another model's checkpoint is refused. */
        dk_error_t* e = NULL;
        dk_test_check(
            dk_shard_load_sharded(unit, size_ + 1, ptrs, (size_t)(2 * size_),
                                  &e) == DK_INVALID_ARGUMENT,
            "a checkpoint of the wrong shape");
        dk_error_free(e);
        free(all);
        free(biases);
        free(saved);
        free(shapes);
        free(ptrs);
        /* Misuse, each a status. */
        e = NULL;
        void* p = NULL;
        dk_test_check(
            dk_shard_full_param(unit, 0, &p, &e) == DK_FAILED_PRECONDITION &&
                strstr(dk_error_message(e), "call Unshard first") != NULL,
            "full_param while sharded");
        dk_error_free(e);
        e = NULL;
        dk_test_check(dk_shard_full_param(unit, 9, &p, &e) == DK_OUT_OF_RANGE,
                      "index out of range");
        dk_error_free(e);
        e = NULL;
        dk_test_check(dk_shard_reduce_grads(NULL, &e) == DK_INVALID_ARGUMENT,
                      "NULL unit");
        dk_error_free(e);
        e = NULL;
        dk_test_check(
            dk_shard_reduce_grads_wait(NULL, &e) == DK_INVALID_ARGUMENT,
            "NULL unit (wait)");
        dk_error_free(e);
        /* A gather still in flight when the unit is destroyed is waited for. */
        DK_TEST_OK(dk_shard_unshard_start(unit, &e_));
      }
      dk_shard_destroy(unit);
    }
  }
  {
    /* The timeline: each step's events, in order, within the calls' times,
     * taken in parts; and bounded when nobody takes them. */
    float v[8] = {0};
    int64_t n = 8;
    DLTensor t = dk_test_host_tensor(v, &n, 1, kDLFloat, 32);
    DLTensor* ps[1] = {&t};
    dk_shard_t* unit = NULL;
    DK_TEST_OK(dk_shard_create(world, ps, 1, NULL, NULL, &unit, &e_));
    dk_shard_event_t ev[8];
    size_t count = 99;
    DK_TEST_OK(dk_shard_take_events(unit, ev, 8, &count, &e_));
    dk_test_check(count == 0, "a new unit has no events");
    struct timespec before, after;
    clock_gettime(CLOCK_REALTIME, &before);
    DK_TEST_OK(dk_shard_unshard_start(unit, &e_));
    DK_TEST_OK(dk_shard_unshard_wait(unit, &e_));
    DK_TEST_OK(dk_shard_reshard(unit, &e_));
    DK_TEST_OK(dk_shard_accumulate_grad(unit, 0, &t, &e_));
    DK_TEST_OK(dk_shard_reduce_grads_start(unit, &e_));
    DK_TEST_OK(dk_shard_reduce_grads_wait(unit, &e_));
    clock_gettime(CLOCK_REALTIME, &after);
    const int64_t lo = before.tv_sec * 1000000000LL + before.tv_nsec;
    const int64_t hi = after.tv_sec * 1000000000LL + after.tv_nsec;
    DK_TEST_OK(dk_shard_take_events(unit, ev, 2, &count, &e_));
    dk_test_check(count == 2, "two events taken when two fit");
    size_t rest = 0;
    DK_TEST_OK(dk_shard_take_events(unit, ev + 2, 6, &rest, &e_));
    dk_test_check(rest == 3, "the other three on the next call");
    const int want[5] = {DK_SHARD_EVENT_UNSHARD_START,
                         DK_SHARD_EVENT_UNSHARD_DONE, DK_SHARD_EVENT_RESHARD,
                         DK_SHARD_EVENT_REDUCE_START,
                         DK_SHARD_EVENT_REDUCE_DONE};
    int in_order = 1;
    for (int i = 0; i < 5; ++i) {
      in_order &= ev[i].kind == want[i] && ev[i].unix_ns >= lo &&
                  ev[i].unix_ns <= hi &&
                  (i == 0 || ev[i].unix_ns >= ev[i - 1].unix_ns);
    }
    dk_test_check(in_order, "events in order, timed between the calls");
    for (int i = 0; i < 2100; ++i) {
      DK_TEST_OK(dk_shard_unshard(unit, &e_));
      DK_TEST_OK(dk_shard_reshard(unit, &e_));
    }
    dk_shard_event_t* many = calloc(5000, sizeof(dk_shard_event_t));
    DK_TEST_OK(dk_shard_take_events(unit, many, 5000, &count, &e_));
    dk_test_check(count == 4096 && many[4095].kind == DK_SHARD_EVENT_RESHARD &&
                      many[4094].kind == DK_SHARD_EVENT_UNSHARD_DONE,
                  "the newest 4096 events are kept");
    free(many);
    dk_error_t* e = NULL;
    dk_test_check(
        dk_shard_take_events(unit, ev, 8, NULL, &e) == DK_INVALID_ARGUMENT,
        "NULL count");
    dk_error_free(e);
    e = NULL;
    dk_test_check(
        dk_shard_take_events(unit, NULL, 8, &count, &e) == DK_INVALID_ARGUMENT,
        "NULL events");
    dk_error_free(e);
    dk_shard_destroy(unit);
  }
  {
    /* Ranks that register different parameters: one error, on every rank. */
    float v[8] = {0};
    int64_t n = size_ > 1 && dk_test_rank == size_ - 1 ? 7 : 8;
    DLTensor t = dk_test_host_tensor(v, &n, 1, kDLFloat, 32);
    DLTensor* ps[1] = {&t};
    dk_shard_t* unit = NULL;
    dk_error_t* e = NULL;
    dk_status_t st = dk_shard_create(world, ps, 1, NULL, NULL, &unit, &e);
    if (size_ > 1) {
      dk_test_check(
          st == DK_INVALID_ARGUMENT && unit == NULL &&
              strstr(dk_error_message(e), "differs across ranks") != NULL,
          "mismatched parameters");
    } else {
      dk_test_check(st == DK_OK, "one rank cannot disagree");
      dk_shard_destroy(unit);
    }
    dk_error_free(e);
    dk_shard_config_t bad;
    dk_shard_config_init(&bad);
    bad.strategy = 9;
    e = NULL;
    dk_test_check(
        dk_shard_create(world, ps, 1, NULL, &bad, &unit, &e) ==
                DK_INVALID_ARGUMENT &&
            strcmp(dk_error_message(e), "config: unknown strategy 9") == 0,
        "unknown strategy");
    dk_error_free(e);
  }
  config_inits();
  frozen_params(world);
  DK_TEST_OK(dk_group_barrier(world, NULL, &e_));
  dk_group_destroy(world);
  dk_shutdown();
  printf("rank %d/%d: sharded checks %s\n", dk_test_rank, size_,
         dk_test_failures == 0 ? "passed" : "FAILED");
  return dk_test_failures == 0 ? 0 : 1;
}
