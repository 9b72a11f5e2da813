#include "cc/core/inline_function.h"

#include <array>
#include <memory>
#include <string>
#include <utility>

#include "gtest/gtest.h"

namespace distkit {
namespace {

using Fn = InlineFunction<int(int), 64>;

// Counts the live copies of a capture, so a leak or a double destruction
// shows.
struct Counted {
  explicit Counted(int* live) : live(live) { ++*live; }
  Counted(const Counted& o) : live(o.live) { ++*live; }
  Counted(Counted&& o) noexcept : live(o.live) { ++*live; }
  ~Counted() { --*live; }
  int* live;
};

TEST(InlineFunctionTest, CallsWhatItHolds) {
  Fn empty;
  EXPECT_FALSE(empty);
  int base = 40;
  Fn add([base](int x) { return base + x; });
  ASSERT_TRUE(add);
  EXPECT_EQ(add(2), 42);
}

// Small captures stay in place, large ones go to the heap; either way the
// capture is alive exactly as long as some holder holds it, across moves.
TEST(InlineFunctionTest, MovesAndDestroysInlineAndHeapCallables) {
  int live = 0;
  {
    Counted c(&live);
    std::array<char, 200> big{};
    big[199] = 5;
    Fn small([c](int x) { return x + 1; });
    Fn large([c, big](int x) { return x + big[199]; });
    EXPECT_EQ(live, 3);
    Fn moved_small(std::move(small));
    Fn moved_large(std::move(large));
    EXPECT_FALSE(small);  // NOLINT: checking the moved-from state
    EXPECT_FALSE(large);  // NOLINT
    EXPECT_EQ(live, 3);
    EXPECT_EQ(moved_small(1), 2);
    EXPECT_EQ(moved_large(1), 6);
    moved_small = std::move(moved_large);
    EXPECT_EQ(live, 2) << "the small capture's copy is gone";
    EXPECT_EQ(moved_small(2), 7);
  }
  EXPECT_EQ(live, 0);
}

// A move-only capture, and state a call changes (as std::function allows).
TEST(InlineFunctionTest, HoldsMoveOnlyAndMutableCallables) {
  auto owned = std::make_unique<int>(7);
  Fn f([p = std::move(owned), calls = 0](int x) mutable {
    ++calls;
    return *p * x + calls;
  });
  EXPECT_EQ(f(2), 15);
  EXPECT_EQ(f(2), 16);
}

}  // namespace
}  // namespace distkit
