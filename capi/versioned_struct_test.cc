// The size-versioned struct rule on a struct that grew twice: every older
// size reads with defaults for what it lacks, a newer one is accepted only
// when what this library does not know is zero.
#include "capi/versioned_struct.h"

#include <cstdint>
#include <cstring>

#include "gtest/gtest.h"

namespace {

using distkit::capi::ReadVersionedStruct;

// Version 1 ended after `a`, version 2 after `b`; version 3 added `c`.
struct Config {
  size_t struct_size;
  int64_t a;
  int32_t b;
  int32_t c;
};

void Init(Config* c) {
  c->struct_size = sizeof(*c);
  c->a = 1;
  c->b = 2;
  c->c = 3;
}

absl::StatusOr<Config> Read(const void* config) {
  return ReadVersionedStruct(
      static_cast<const Config*>(config), &Init, "dk_test_config",
      {DK_FIELD_SPAN(Config, a), DK_FIELD_SPAN(Config, b),
       DK_FIELD_SPAN(Config, c)});
}

TEST(VersionedStructTest, NullIsAllDefaults) {
  absl::StatusOr<Config> c = Read(nullptr);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->a, 1);
  EXPECT_EQ(c->b, 2);
  EXPECT_EQ(c->c, 3);
}

TEST(VersionedStructTest, OlderStructsKeepDefaultsForNewerFields) {
  Config mine{};
  mine.a = 10;
  mine.b = 20;
  mine.c = 30;
  mine.struct_size = offsetof(Config, b);  // version 1
  absl::StatusOr<Config> c = Read(&mine);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->struct_size, sizeof(Config));
  EXPECT_EQ(c->a, 10);
  EXPECT_EQ(c->b, 2);
  EXPECT_EQ(c->c, 3);
  mine.struct_size = offsetof(Config, c);  // version 2
  c = Read(&mine);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->b, 20);
  EXPECT_EQ(c->c, 3);
  mine.struct_size = sizeof(size_t);  // no field at all
  c = Read(&mine);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->a, 1);
}

TEST(VersionedStructTest, SizesThatCutAFieldOrTheSizeItselfAreRejected) {
  Config mine;
  Init(&mine);
  mine.struct_size = offsetof(Config, a) + 3;
  absl::StatusOr<Config> c = Read(&mine);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.status().message(),
            "config: struct_size 11 ends inside a field of dk_test_config_t "
            "(call dk_test_config_init_sized)");
  mine.struct_size = 4;
  c = Read(&mine);
  EXPECT_EQ(c.status().message(),
            "config: struct_size 4 is too small for any dk_test_config_t "
            "(call dk_test_config_init_sized)");
}

// A caller compiled against a newer header, with one more field.
struct NewerConfig {
  Config known;
  int64_t d;
};

TEST(VersionedStructTest, NewerStructsNeedTheUnknownFieldsZero) {
  NewerConfig newer;
  std::memset(&newer, 0, sizeof(newer));
  Init(&newer.known);
  newer.known.struct_size = sizeof(newer);
  newer.known.c = 33;
  absl::StatusOr<Config> c = Read(&newer);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->c, 33);
  newer.d = 7;
  c = Read(&newer);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.status().message(),
            "config: this dk_test_config_t (32 bytes) sets fields this library "
            "does not know (it knows 24 bytes); upgrade the library");
}

}  // namespace
