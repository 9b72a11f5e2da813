#include "cc/store/gloo_store_adapter.h"

#include <gloo/common/error.h>

#include "cc/store/hash_store.h"
#include "gtest/gtest.h"

namespace distkit {
namespace {

TEST(GlooStoreAdapterTest, ForwardsToTheStore) {
  auto store = std::make_shared<HashStore>();
  GlooStoreAdapter adapter(store);
  adapter.set("k", {'a', '\0', 'b'});
  EXPECT_EQ(*store->Get("k"), std::string("a\0b", 3));
  EXPECT_EQ(adapter.get("k"), (std::vector<char>{'a', '\0', 'b'}));
  adapter.wait({"k"});
  adapter.wait({"k"}, std::chrono::milliseconds(10));
}

TEST(GlooStoreAdapterTest, TimeoutBecomesGlooIoException) {
  auto store = std::make_shared<HashStore>();
  store->set_timeout(absl::Milliseconds(100));
  GlooStoreAdapter adapter(store);
  try {
    adapter.wait({"missing"}, std::chrono::milliseconds(100));
    FAIL() << "expected an exception";
  } catch (const gloo::IoException& e) {
    EXPECT_NE(std::string(e.what()).find("DEADLINE_EXCEEDED"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("missing"), std::string::npos);
  }
  EXPECT_THROW(adapter.get("missing"), gloo::IoException);
}

}  // namespace
}  // namespace distkit
