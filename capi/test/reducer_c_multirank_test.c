/* The gradient reducer through the C ABI, in every rank of a real job:
 * parameters broadcast from rank 0, averaged gradients over several
 * iterations (bucket rebuild included), abandoned iterations, no_sync
 * accumulation, bucket views, find_unused_parameters, and misuse answered with
 * a status, never a crash. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "distkit/distkit.h"
#include "testing/c/host_tensor.h"
#include "testing/c/rank_check.h"

#define NP 3
static const int64_t kSizes[NP] = {1000, 7, 300};
static int size_;

static float grad_value(int r, int p, int64_t k, int it) {
  return 0.5f * (float)(r + 1) * (float)((k % 9) - 4) + (float)p -
         0.25f * (float)it;
}

static double mean(int p, int64_t k, int it) {
  double s = 0;
  for (int r = 0; r < size_; ++r) s += grad_value(r, p, k, it) / size_;
  return s;
}

/* A backward that fails after some gradients were marked ready (buckets
 * launched): dk_reducer_abandon ends the iteration on every rank, so the next
 * one starts afresh (no "marked ready twice"); abandoning again, outside an
 * iteration, does nothing. */
static void abandon_partial(dk_reducer_t* reducer, float** grads,
                            DLTensor* gt) {
  for (int p = NP - 1; p >= 1; --p) {
    for (int64_t k = 0; k < kSizes[p]; ++k) grads[p][k] = 1e6f;
    DK_TEST_OK(dk_reducer_mark_ready(reducer, p, &gt[p], &e_));
  }
  DK_TEST_OK(dk_reducer_abandon(reducer, &e_));
  DK_TEST_OK(dk_reducer_abandon(reducer, &e_));
}

int main(void) {
  dk_group_t* world = dk_test_init(NULL, 0);
  size_ = dk_group_size(world);

  float* params[NP];
  float* grads[NP];
  int64_t shapes[NP];
  DLTensor pt[NP], gt[NP];
  DLTensor* pp[NP];
  for (int p = 0; p < NP; ++p) {
    shapes[p] = kSizes[p];
    params[p] = malloc(sizeof(float) * kSizes[p]);
    grads[p] = calloc(kSizes[p], sizeof(float));
    for (int64_t k = 0; k < kSizes[p]; ++k)
      params[p][k] = (float)(dk_test_rank * 10 + p);
    pt[p] = dk_test_float_vector(params[p], &shapes[p]);
    gt[p] = dk_test_float_vector(grads[p], &shapes[p]);
    pp[p] = &pt[p];
  }
  dk_reducer_config_t config;
  dk_reducer_config_init(&config);
  config.first_bucket_cap_mb = 1000.0 / (1 << 20);
  dk_reducer_t* reducer = NULL;
  DK_TEST_OK(dk_reducer_create(world, pp, NP, NULL, 0, &config, &reducer, &e_));
  for (int p = 0; p < NP; ++p)
    if (params[p][5 % kSizes[p]] != (float)p)
      dk_test_die("parameters broadcast from rank 0", NULL);
  if (dk_reducer_num_buckets(reducer) < 2)
    dk_test_die("expected several buckets", NULL);

  /* Abandoned before the first finalize (the ready order it saw must not
   * decide the rebuilt buckets) and after the rebuild (iteration 2). */
  for (int it = 0; it < 3; ++it) {
    if (it != 1) abandon_partial(reducer, grads, gt);
    for (int p = NP - 1; p >= 0; --p) {
      for (int64_t k = 0; k < kSizes[p]; ++k)
        grads[p][k] = grad_value(dk_test_rank, p, k, it);
      DK_TEST_OK(dk_reducer_mark_ready(reducer, p, &gt[p], &e_));
    }
    DK_TEST_OK(dk_reducer_finalize(reducer, &e_));
    for (int p = 0; p < NP; ++p)
      for (int64_t k = 0; k < kSizes[p]; ++k)
        if (fabs(grads[p][k] - mean(p, k, it)) > 1e-5)
          dk_test_die("averaged gradient", NULL);
  }
  /* no_sync: accumulate iteration 3 locally, then reduce 3 + 4. */
  dk_reducer_set_require_sync(reducer, 0);
  for (int p = 0; p < NP; ++p) {
    for (int64_t k = 0; k < kSizes[p]; ++k)
      grads[p][k] = grad_value(dk_test_rank, p, k, 3);
    DK_TEST_OK(dk_reducer_mark_ready(reducer, p, &gt[p], &e_));
  }
  DK_TEST_OK(dk_reducer_finalize(reducer, &e_));
  dk_reducer_set_require_sync(reducer, 1);
  for (int p = 0; p < NP; ++p) {
    for (int64_t k = 0; k < kSizes[p]; ++k)
      grads[p][k] += grad_value(dk_test_rank, p, k, 4);
    DK_TEST_OK(dk_reducer_mark_ready(reducer, p, &gt[p], &e_));
  }
  DK_TEST_OK(dk_reducer_finalize(reducer, &e_));
  for (int p = 0; p < NP; ++p)
    for (int64_t k = 0; k < kSizes[p]; ++k)
      if (fabs(grads[p][k] - mean(p, k, 3) - mean(p, k, 4)) > 1e-4)
        dk_test_die("no_sync accumulation", NULL);

  /* Misuse: a missing gradient is named on every rank; wrong sizes refused. */
  {
    dk_error_t* e = NULL;
    DK_TEST_OK(dk_reducer_mark_ready(reducer, 0, &gt[0], &e_));
    if (dk_reducer_mark_ready(reducer, 1, &gt[2], &e) != DK_INVALID_ARGUMENT)
      dk_test_die("size mismatch", e);
    dk_error_free(e);
    e = NULL;
    if (dk_reducer_mark_ready(reducer, 9, &gt[0], &e) != DK_OUT_OF_RANGE)
      dk_test_die("index", e);
    dk_error_free(e);
    e = NULL;
    if (dk_reducer_finalize(reducer, &e) != DK_FAILED_PRECONDITION ||
        strstr(dk_error_message(e), "params[1]") == NULL)
      dk_test_die("missing gradient", e);
    dk_error_free(e);
    e = NULL;
    if (dk_reducer_grad_view(reducer, 0, (void**)&params[0], &e) !=
        DK_FAILED_PRECONDITION)
      dk_test_die("grad_view without views", e);
    dk_error_free(e);
    e = NULL;
    if (dk_reducer_abandon(NULL, &e) == DK_OK) dk_test_die("abandon NULL", e);
    dk_error_free(e);
    e = NULL;
    if (dk_reducer_create(world, NULL, 2, NULL, 0, NULL, &reducer, &e) !=
        DK_INVALID_ARGUMENT)
      dk_test_die("NULL params", e);
    dk_error_free(e);
  }
  dk_reducer_destroy(reducer);

  /* Header rule 8: a caller built against an older, smaller config (here:
   * before comm_hook) is read with defaults for the fields it lacks; bytes
   * past its struct_size are never read. A newer, larger one is refused only
   * when it sets a field this library does not know. */
  {
    dk_reducer_config_t older;
    dk_reducer_config_init(&older);
    older.struct_size = offsetof(dk_reducer_config_t, comm_hook);
    older.comm_hook = 99; /* not part of the caller's struct */
    DK_TEST_OK(
        dk_reducer_create(world, pp, NP, NULL, 0, &older, &reducer, &e_));
    for (int p = 0; p < NP; ++p) {
      for (int64_t k = 0; k < kSizes[p]; ++k)
        grads[p][k] = grad_value(dk_test_rank, p, k, 5);
      DK_TEST_OK(dk_reducer_mark_ready(reducer, p, &gt[p], &e_));
    }
    DK_TEST_OK(dk_reducer_finalize(reducer, &e_));
    for (int p = 0; p < NP; ++p)
      for (int64_t k = 0; k < kSizes[p]; ++k)
        if (fabs(grads[p][k] - mean(p, k, 5)) > 1e-5)
          dk_test_die("average through an older config struct", NULL);
    dk_reducer_destroy(reducer);
    reducer = NULL;

    struct {
      dk_reducer_config_t known;
      int64_t appended_later;
    } newer;
    memset(&newer, 0, sizeof(newer));
    dk_reducer_config_init(&newer.known);
    newer.known.struct_size = sizeof(newer);
    newer.appended_later = 1;
    dk_error_t* e = NULL;
    if (dk_reducer_create(world, pp, NP, NULL, 0, &newer.known, &reducer, &e) !=
            DK_INVALID_ARGUMENT ||
        strstr(dk_error_message(e), "sets fields this library does not know") ==
            NULL)
      dk_test_die("a newer config struct with an unknown field set", e);
    dk_error_free(e);
  }

  /* Bucket views and find_unused_parameters: parameter 1 unused on rank 0. */
  config.gradient_as_bucket_view = 1;
  config.find_unused_parameters = 1;
  DK_TEST_OK(dk_reducer_create(world, pp, NP, NULL, 0, &config, &reducer, &e_));
  if (dk_test_rank == 0) {
    int32_t unused = 1;
    DK_TEST_OK(dk_reducer_prepare(reducer, &unused, 1, &e_));
  }
  float* views[NP];
  for (int p = 0; p < NP; ++p) {
    DK_TEST_OK(dk_reducer_grad_view(reducer, p, (void**)&views[p], &e_));
    if (p == 1 && dk_test_rank == 0) continue;
    for (int64_t k = 0; k < kSizes[p]; ++k)
      views[p][k] = grad_value(dk_test_rank, p, k, 0);
    DLTensor v = dk_test_float_vector(views[p], &shapes[p]);
    DK_TEST_OK(dk_reducer_mark_ready(reducer, p, &v, &e_));
  }
  DK_TEST_OK(dk_reducer_finalize(reducer, &e_));
  for (int p = 0; p < NP; ++p) {
    for (int64_t k = 0; k < kSizes[p]; ++k) {
      double want = p == 1 ? mean(p, k, 0) - grad_value(0, p, k, 0) / size_
                           : mean(p, k, 0);
      if (fabs(views[p][k] - want) > 1e-5)
        dk_test_die("bucket view average", NULL);
    }
  }
  if (dk_reducer_globally_used(reducer, 1) != (size_ > 1))
    dk_test_die("globally used", NULL);
  dk_reducer_destroy(reducer);

  for (int p = 0; p < NP; ++p) {
    free(params[p]);
    free(grads[p]);
  }
  DK_TEST_OK(dk_group_barrier(world, NULL, &e_));
  dk_group_destroy(world);
  printf("rank %d/%d: reducer checks passed\n", dk_test_rank, size_);
  return 0;
}
