#include "cc/launch/hostlist.h"

#include <sys/resource.h>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace distkit {
namespace {

using Hosts = std::vector<std::string>;

TEST(HostlistTest, Expands) {
  EXPECT_EQ(*ExpandHostlist("node01"), Hosts({"node01"}));
  EXPECT_EQ(*ExpandHostlist("node[01-03,07]"),
            Hosts({"node01", "node02", "node03", "node07"}));
  EXPECT_EQ(*ExpandHostlist("a1,b[2-3]"), Hosts({"a1", "b2", "b3"}));
  EXPECT_EQ(*ExpandHostlist("r[1-2]-n[1-2]"),
            Hosts({"r1-n1", "r1-n2", "r2-n1", "r2-n2"}));
  EXPECT_EQ(*ExpandHostlist("gpu[8-11]"),
            Hosts({"gpu8", "gpu9", "gpu10", "gpu11"}));
  EXPECT_EQ(*ExpandHostlist("n[098-101]"),
            Hosts({"n098", "n099", "n100", "n101"}));
  EXPECT_EQ(*ExpandHostlist("x[5],y"), Hosts({"x5", "y"}));
  EXPECT_EQ(*ExpandHostlist("node[1-2].cluster"),
            Hosts({"node1.cluster", "node2.cluster"}));
}

// The largest numbers end their range (a loop to `i <= b` wrapped at
// UINT64_MAX and never ended).
TEST(HostlistTest, ExpandsUpToTheLargestNumber) {
  EXPECT_EQ(*ExpandHostlist("n[18446744073709551615]"),
            Hosts({"n18446744073709551615"}));
  EXPECT_EQ(*ExpandHostlist("n[18446744073709551614-18446744073709551615]"),
            Hosts({"n18446744073709551614", "n18446744073709551615"}));
  EXPECT_EQ(ExpandHostlist("n[0-18446744073709551615]").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ExpandHostlist("n[18446744073709551616]").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(HostlistTest, RejectsMalformed) {
  for (const char* bad :
       {"", "node[1-3", "node1-3]", "node[3-1]", "node[a-b]", "node[]", "a,,b",
        "n[[1]]", "n[1-]", "n[1-1000000000]"}) {
    absl::StatusOr<Hosts> h = ExpandHostlist(bad);
    EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(h.status().message().find("malformed hostlist"),
              absl::string_view::npos)
        << bad;
  }
}

long MaxRssKib() {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

// The host limit bounds the expansion as it goes: 200 parts of 0-999999
// are refused before they are made (checked only after every part, 20 of
// them took 1 GB).
TEST(HostlistTest, LimitIsCheckedWhileExpanding) {
  std::string body = "0-999999";
  for (int i = 1; i < 200; ++i) absl::StrAppend(&body, ",0-999999");
  const long before = MaxRssKib();
  for (const std::string& text :
       {absl::StrCat("n[", body, "]"), absl::StrCat("a[1-2]b[", body, "]"),
        absl::StrCat("x[0-999999],n[", body, "]")}) {
    absl::StatusOr<Hosts> h = ExpandHostlist(text);
    EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(h.status().message().find("too many hosts"),
              absl::string_view::npos)
        << h.status();
  }
  // One part's million names at most (about 100 MB with the vector), never
  // all of them.
  EXPECT_LT(MaxRssKib() - before, 256 * 1024);
  // Up to the limit still expands.
  EXPECT_EQ(ExpandHostlist("n[1-500000],m[1-500000]")->size(), 1000000u);
  EXPECT_EQ(ExpandHostlist("n[1-500000],m[1-500001]").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace distkit
