#include "tools/distrun/distrun_options.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace distkit {
namespace {

TEST(DistrunOptionsTest, ParsesBothSpellings) {
  DistrunOptions o = *ParseDistrunArgs(
      {"--nproc-per-node", "4", "--nnodes=2", "--node_rank", "1",
       "--master-addr", "10.1.1.1", "--master_port=1234", "--log-dir", "/tmp/x",
       "--timeout", "2.5", "--grace-period=1", "--", "prog", "a", "b"});
  EXPECT_EQ(o.nproc_per_node, 4);
  EXPECT_EQ(o.nnodes, 2);
  EXPECT_EQ(o.node_rank, 1);
  EXPECT_EQ(o.master_addr, "10.1.1.1");
  EXPECT_EQ(o.master_port, 1234);
  EXPECT_EQ(o.log_dir, "/tmp/x");
  EXPECT_EQ(o.timeout, absl::Milliseconds(2500));
  EXPECT_EQ(o.grace_period, absl::Seconds(1));
  ASSERT_EQ(o.programs.size(), 1u);
  EXPECT_EQ(o.programs[0], (std::vector<std::string>{"prog", "a", "b"}));
}

TEST(DistrunOptionsTest, Defaults) {
  DistrunOptions o = *ParseDistrunArgs({"prog"});
  EXPECT_EQ(o.nproc_per_node, 1);
  EXPECT_EQ(o.master_addr, "127.0.0.1");
  EXPECT_EQ(o.master_port, 29500);
  EXPECT_EQ(o.timeout, absl::ZeroDuration());
  EXPECT_EQ(o.max_replacements, 0);
}

TEST(DistrunOptionsTest, MaxReplacements) {
  EXPECT_EQ(
      ParseDistrunArgs({"--max-replacements", "3", "prog"})->max_replacements,
      3);
  EXPECT_EQ(
      ParseDistrunArgs({"--max_replacements=0", "prog"})->max_replacements, 0);
  EXPECT_FALSE(ParseDistrunArgs({"--max-replacements", "-1", "prog"}).ok());
}

TEST(DistrunOptionsTest, MinRanks) {
  EXPECT_EQ(ParseDistrunArgs({"prog"})->min_ranks, 0);
  EXPECT_EQ(ParseDistrunArgs({"--min-ranks", "2", "prog"})->min_ranks, 2);
  EXPECT_EQ(ParseDistrunArgs({"--min_ranks=1", "prog"})->min_ranks, 1);
  EXPECT_FALSE(ParseDistrunArgs({"--min-ranks", "x", "prog"}).ok());
}

TEST(DistrunOptionsTest, OneProgramPerRank) {
  DistrunOptions o = *ParseDistrunArgs(
      {"--nproc-per-node", "3", "--", "a", "1", ":", "b", ":", "c", "x"});
  ASSERT_EQ(o.programs.size(), 3u);
  EXPECT_EQ(o.programs[1], (std::vector<std::string>{"b"}));
  EXPECT_EQ(o.programs[2], (std::vector<std::string>{"c", "x"}));
  EXPECT_FALSE(
      ParseDistrunArgs({"--nproc-per-node", "3", "--", "a", ":", "b"}).ok());
  EXPECT_TRUE(ParseDistrunArgs(
                  {"--nproc-per-node", "2", "--cpu-bind", "core", "--", "a"})
                  ->bind_cores);
  EXPECT_FALSE(
      ParseDistrunArgs({"--nproc-per-node", "2", "--", "a"})->bind_cores);
  EXPECT_FALSE(ParseDistrunArgs(
                   {"--nproc-per-node", "2", "--cpu-bind=socket", "--", "a"})
                   .ok());
  EXPECT_FALSE(
      ParseDistrunArgs({"--nproc-per-node", "2", "--", "a", ":", ":", "b"})
          .ok());
}

// A trailing ':' is an empty last program, as a leading one is an empty
// first: rejected (it ran the first program on every rank).
TEST(DistrunOptionsTest, RejectsATrailingColon) {
  for (const char* ranks : {"1", "2"}) {
    absl::Status s =
        ParseDistrunArgs({"--nproc-per-node", ranks, "--", "prog", "argA", ":"})
            .status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << ranks;
    EXPECT_NE(s.message().find("empty program after ':'"),
              absl::string_view::npos)
        << s;
  }
  EXPECT_FALSE(
      ParseDistrunArgs({"--nproc-per-node", "2", "--", "a", ":", "b", ":"})
          .ok());
}

// nan and inf are no durations (nan passed `s < 0`).
TEST(DistrunOptionsTest, RejectsNonFiniteSeconds) {
  for (const char* flag :
       {"--timeout", "--grace-period", "--exit-barrier-timeout"}) {
    for (const char* value :
         {"nan", "-nan", "NaN", "inf", "-inf", "infinity"}) {
      absl::Status s = ParseDistrunArgs({flag, value, "--", "p"}).status();
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument)
          << flag << " " << value;
      EXPECT_NE(s.message().find(absl::StrCat(flag, ": '", value, "'")),
                absl::string_view::npos)
          << s;
    }
    EXPECT_TRUE(ParseDistrunArgs({flag, "0.5", "--", "p"}).ok()) << flag;
  }
}

TEST(DistrunOptionsTest, ErrorsNameTheFlag) {
  absl::Status s =
      ParseDistrunArgs({"--nproc-per-node", "0", "--", "p"}).status();
  EXPECT_NE(s.message().find("--nproc-per-node"), absl::string_view::npos) << s;
  s = ParseDistrunArgs({"--bogus", "1", "--", "p"}).status();
  EXPECT_NE(s.message().find("--bogus: unknown flag"), absl::string_view::npos)
      << s;
  s = ParseDistrunArgs({"--nnodes", "2", "--node-rank", "2", "--", "p"})
          .status();
  EXPECT_NE(s.message().find("--node-rank"), absl::string_view::npos) << s;
  s = ParseDistrunArgs({"--nproc-per-node"}).status();
  EXPECT_NE(s.message().find("needs a value"), absl::string_view::npos) << s;
  EXPECT_FALSE(ParseDistrunArgs({"--nproc-per-node", "2", "--"}).ok());
  EXPECT_FALSE(
      ParseDistrunArgs({"--nnodes", "2", "--master-port", "0", "p"}).ok());
  // MASTER_PORT is --master-port + 1 (torch.distributed's): none above 65535.
  s = ParseDistrunArgs({"--master-port", "65535", "--", "p"}).status();
  EXPECT_NE(s.message().find("MASTER_PORT is --master-port + 1"),
            absl::string_view::npos)
      << s;
  EXPECT_TRUE(ParseDistrunArgs({"--master-port", "65534", "--", "p"}).ok());
  EXPECT_EQ(ParseDistrunArgs({"--help"}).status().code(),
            absl::StatusCode::kCancelled);
}

}  // namespace
// Several nodes: node 0 refuses a master name that resolves to loopback
// (the store would listen where no other host reaches it), before the
// other checks; a loopback literal (nodes on one host) and the other
// nodes are accepted.
TEST(DistrunOptionsTest, SeveralNodesRefuseALoopbackMasterName) {
  for (const char* port : {"0", "29500"}) {
    absl::Status s =
        ParseDistrunArgs({"--nnodes", "2", "--node-rank", "0", "--master-addr",
                          "localhost", "--master-port", port, "--", "true"})
            .status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("--master-addr: 'localhost' resolves to the "
                               "loopback address "),
              absl::string_view::npos)
        << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "127.0.0.1") ||
                absl::StrContains(s.message(), "::1"))
        << s;
  }
  for (const char* addr : {"127.0.0.1", "127.0.1.1", "::1", "[::1]"}) {
    EXPECT_TRUE(ParseDistrunArgs({"--nnodes", "2", "--master-addr", addr,
                                  "--master-port", "29500", "--", "true"})
                    .ok())
        << addr;
  }
  EXPECT_TRUE(ParseDistrunArgs(
                  {"--nnodes", "2", "--master-port", "29500", "--", "true"})
                  .ok());  // the default, 127.0.0.1
  EXPECT_TRUE(ParseDistrunArgs({"--nnodes", "2", "--node-rank", "1",
                                "--master-addr", "localhost", "--", "true"})
                  .ok());
  EXPECT_TRUE(
      ParseDistrunArgs({"--master-addr", "localhost", "--", "true"}).ok());
}

}  // namespace distkit
