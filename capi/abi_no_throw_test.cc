// Convention 12 under memory exhaustion: no exception leaves an entry point
// of the C ABI when allocations fail. This binary replaces the global
// operator new with one that, once armed on a thread, lets that thread's
// first n allocations through and throws std::bad_alloc for every later one
// (memory that stays exhausted). Each call runs for n = 0, 1, 2, ... until
// it needs no more than n allocations; every run must return (no
// exception), with a status and an error that agree, or the answer the
// header gives for a bad argument.
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "distkit/distkit.h"
#include "gtest/gtest.h"

namespace {

// Allocations this thread may still make; -1: no limit.
thread_local long allowed = -1;
// Whether an allocation failed since the thread was armed.
thread_local bool failed = false;

void* Allocate(std::size_t size) {
  if (allowed == 0) {
    failed = true;
    throw std::bad_alloc();
  }
  if (allowed > 0) --allowed;
  void* p = std::malloc(size == 0 ? 1 : size);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

}  // namespace

void* operator new(std::size_t size) { return Allocate(size); }
void* operator new[](std::size_t size) { return Allocate(size); }
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  try {
    return Allocate(size);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept {
  try {
    return Allocate(size);
  } catch (...) {
    return nullptr;
  }
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace {

// Runs `call()` with the first n allocations allowed, for n = 0, 1, ...
// until no allocation failed (at most `max_n`): `call` must not throw, and
// `check(n, memory_ran_out)` (run with memory back) checks its answer.
template <typename Call, typename Check>
void UnderMemoryExhaustion(const char* what, Call&& call, Check&& check,
                           long max_n = 5000) {
  for (long n = 0; n <= max_n; ++n) {
    bool threw = false;
    failed = false;
    allowed = n;
    try {
      call();
    } catch (...) {
      threw = true;
    }
    allowed = -1;
    const bool ran_out = failed;
    ASSERT_FALSE(threw) << what << ": an exception crossed the ABI with "
                        << "allocations failing after " << n;
    check(n, ran_out);
    if (!ran_out) return;
  }
  ADD_FAILURE() << what << ": still failing after " << max_n << " allocations";
}

// A status and its error agree: DK_OK without an error, else an error of
// the same code with a message, which dk_error_free takes.
void CheckReported(const char* what, long n, dk_status_t status,
                   dk_error_t* err) {
  if (status == DK_OK) {
    EXPECT_EQ(err, nullptr) << what << " at " << n;
    return;
  }
  ASSERT_NE(err, nullptr) << what << " at " << n << ": status " << status
                          << " without an error";
  EXPECT_EQ(dk_error_code(err), status) << what << " at " << n;
  EXPECT_NE(dk_error_message(err), nullptr);
  EXPECT_GT(std::strlen(dk_error_message(err)), 0u) << what << " at " << n;
  dk_error_free(err);
}

// The error path of the guard: building the error's status and copying its
// message into a dk_error_t both allocate.
TEST(AbiNoThrowTest, ErrorsWithoutMemory) {
  dk_status_t status = DK_OK;
  dk_error_t* err = nullptr;
  UnderMemoryExhaustion(
      "dk_group_barrier without init",
      [&] {
        err = nullptr;
        status = dk_group_barrier(nullptr, nullptr, &err);
      },
      [&](long n, bool ran_out) {
        if (ran_out) {
          EXPECT_TRUE(status == DK_FAILED_PRECONDITION ||
                      status == DK_RESOURCE_EXHAUSTED)
              << status << " at " << n;
        } else {
          EXPECT_EQ(status, DK_FAILED_PRECONDITION);
          EXPECT_NE(std::string(dk_error_message(err)).find("dk_init"),
                    std::string::npos)
              << dk_error_message(err);
        }
        CheckReported("dk_group_barrier", n, status, err);
      });
  dk_store_t* store = nullptr;
  UnderMemoryExhaustion(
      "dk_store_connect without an address",
      [&] {
        err = nullptr;
        dk_store_config_t config;
        dk_store_config_init_sized(&config, sizeof config);
        status = dk_store_connect(&config, &store, &err);
      },
      [&](long n, bool ran_out) {
        EXPECT_TRUE(status == DK_INVALID_ARGUMENT ||
                    (ran_out && status == DK_RESOURCE_EXHAUSTED))
            << status << " at " << n;
        EXPECT_EQ(store, nullptr);
        CheckReported("dk_store_connect", n, status, err);
      });
  UnderMemoryExhaustion(
      "dk_launcher_info",
      [&] {
        err = nullptr;
        dk_launcher_info_t* info = nullptr;
        status = dk_launcher_info("none", &info, &err);
        dk_free(info);
      },
      [&](long n, bool) { CheckReported("dk_launcher_info", n, status, err); });
}

// Calls without a status, outside a job.
TEST(AbiNoThrowTest, CallsWithoutStatusOutsideAJob) {
  UnderMemoryExhaustion(
      "dk_group_abort(NULL) without init", [] { dk_group_abort(nullptr); },
      [](long, bool) {});
  UnderMemoryExhaustion(
      "dk_shutdown without init", [] { dk_shutdown(); }, [](long, bool) {});
  int32_t answers[4] = {};
  UnderMemoryExhaustion(
      "queries of the default group without init",
      [&] {
        answers[0] = dk_group_rank(nullptr);
        answers[1] = dk_group_size(nullptr);
        answers[2] = dk_is_distributed();
        answers[3] = dk_group_name(nullptr) == nullptr ? 0 : 1;
      },
      [&](long n, bool ran_out) {
        if (ran_out) return;  // -1 is allowed then
        EXPECT_EQ(answers[0], 0) << n;
        EXPECT_EQ(answers[1], 1) << n;
        EXPECT_EQ(answers[2], 0) << n;
        EXPECT_EQ(answers[3], 0) << n;
      });
  DLDevice device{kDLCUDA, 3};
  UnderMemoryExhaustion(
      "dk_get_device", [&] { dk_get_device(&device); }, [](long, bool) {});
  const char* launcher = nullptr;
  UnderMemoryExhaustion(
      "dk_launcher_infer", [&] { launcher = dk_launcher_infer(); },
      [&](long n, bool) { EXPECT_NE(launcher, nullptr) << n; });
}

// A store this process serves.
dk_store_t* ServeStore() {
  dk_store_config_t config;
  dk_store_config_init_sized(&config, sizeof config);
  config.address = "127.0.0.1:0";
  dk_store_t* store = nullptr;
  dk_error_t* err = nullptr;
  EXPECT_EQ(dk_store_serve(&config, &store, &err), DK_OK)
      << dk_error_message(err);
  dk_error_free(err);
  return store;
}

// A job of one rank on `store`; its world.
dk_group_t* Init(dk_store_t* store) {
  dk_group_t* world = nullptr;
  dk_error_t* err = nullptr;
  EXPECT_EQ(dk_init_with_store(store, 0, 1, nullptr, &world, &err), DK_OK)
      << dk_error_message(err);
  dk_error_free(err);
  return world;
}

TEST(AbiNoThrowJobTest, ShutdownWithoutMemory) {
  // Each run shuts down a job joined with memory to spare, on a store of
  // its own (a store call cut short may leave its connection unusable).
  for (long n = 0; n < 2000; ++n) {
    dk_store_t* store = ServeStore();
    ASSERT_NE(store, nullptr);
    dk_group_t* world = Init(store);
    ASSERT_NE(world, nullptr);
    bool threw = false;
    failed = false;
    allowed = n;
    try {
      dk_shutdown();
    } catch (...) {
      threw = true;
    }
    allowed = -1;
    const bool ran_out = failed;
    ASSERT_FALSE(threw) << "dk_shutdown let an exception out with allocations "
                        << "failing after " << n;
    const bool distributed_after = dk_is_distributed() != 0;
    // Shutting down forgets the default group even without memory.
    EXPECT_FALSE(distributed_after) << n;
    if (distributed_after) dk_shutdown();
    dk_group_destroy(world);
    dk_store_destroy(store);
    if (!ran_out) return;
  }
  ADD_FAILURE() << "dk_shutdown still failing after 2000 allocations";
}

TEST(AbiNoThrowJobTest, GroupCallsWithoutMemory) {
  dk_store_t* store = ServeStore();
  ASSERT_NE(store, nullptr);
  dk_group_t* world = Init(store);
  ASSERT_NE(world, nullptr);
  const char* names[2] = {};
  UnderMemoryExhaustion(
      "dk_group_name / dk_group_backend",
      [&] {
        names[0] = dk_group_name(nullptr);
        names[1] = dk_group_backend(world);
      },
      [&](long n, bool ran_out) {
        if (ran_out) return;  // NULL is allowed then
        ASSERT_NE(names[0], nullptr) << n;
        ASSERT_NE(names[1], nullptr) << n;
        EXPECT_STREQ(names[0], "world");
        EXPECT_STREQ(names[1], "gloo");
      });
  dk_parallel_state_t* state = nullptr;
  dk_status_t status = DK_OK;
  dk_error_t* err = nullptr;
  UnderMemoryExhaustion(
      "dk_parallel_state_create",
      [&] {
        err = nullptr;
        status = dk_parallel_state_create(nullptr, DK_GROUP_UNUSED, nullptr,
                                          &state, &err);
      },
      [&](long n, bool) {
        CheckReported("dk_parallel_state_create", n, status, err);
        if (status == DK_OK) {
          ASSERT_NE(state, nullptr);
        } else {
          EXPECT_EQ(state, nullptr);
        }
      });
  ASSERT_NE(state, nullptr);
  char* text = nullptr;
  UnderMemoryExhaustion(
      "dk_parallel_state_describe",
      [&] {
        err = nullptr;
        text = nullptr;
        status = dk_parallel_state_describe(state, &text, &err);
      },
      [&](long n, bool) {
        CheckReported("dk_parallel_state_describe", n, status, err);
        if (status == DK_OK) {
          EXPECT_STREQ(text,
                       "data_parallel_group: group: None, initialized: True, "
                       "world size: 1, tensor_parallel_group: group: -1, "
                       "initialized: False, world size: -1, "
                       "expert_model_parallel_group: group: None, "
                       "initialized: True, world size: 1");
        }
        dk_free(text);
      });
  int32_t answers[2] = {};
  UnderMemoryExhaustion(
      "dk_parallel_state_rank / size",
      [&] {
        answers[0] = dk_parallel_state_rank(state, DK_PARALLEL_DATA);
        answers[1] = dk_parallel_state_size(state, DK_PARALLEL_TENSOR);
      },
      [&](long n, bool ran_out) {
        if (ran_out) return;
        EXPECT_EQ(answers[0], 0) << n;
        EXPECT_EQ(answers[1], -1) << n;
      });
  UnderMemoryExhaustion(
      "dk_parallel_state_destroy", [&] { dk_parallel_state_destroy(state); },
      [](long, bool) {});
  EXPECT_EQ(dk_parallel_state_size(state, DK_PARALLEL_DATA), -1);
  UnderMemoryExhaustion(
      "dk_group_abort", [&] { dk_group_abort(world); }, [](long, bool) {});
  dk_shutdown();
  dk_group_destroy(world);
  dk_store_destroy(store);
}

}  // namespace
