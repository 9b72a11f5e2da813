// The mmengine / modelopt API across a real job (world sizes 1-4), joined with
// InitDist("pytorch") from the variables distrun sets. Expected values are
// computed by each rank from formulas of (rank, index).

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cc/dist_api/collect_results.h"
#include "cc/dist_api/collectives.h"
#include "cc/dist_api/dist.h"
#include "cc/dist_api/object_collectives.h"
#include "cc/dist_api/parallel_state.h"
#include "gtest/gtest.h"
#include "testing/cc/dist_job.h"

namespace distkit {
namespace dist {
namespace {

int R() { return GetRank(); }
int W() { return GetWorldSize(); }

TEST(DistApi, TopologyAndLocalGroup) {
  EXPECT_TRUE(IsDistributed());
  EXPECT_EQ(GetBackend(), std::optional<std::string>("gloo"));
  EXPECT_EQ(GetDistInfo(),
            std::make_pair(atoi(getenv("RANK")), atoi(getenv("WORLD_SIZE"))));
  EXPECT_EQ(IsMainProcess(), R() == 0);
  EXPECT_EQ(GetCommDevice(), Device::Cpu());
  EXPECT_EQ(MasterOnly([] { return 1; }).has_value(), R() == 0);
  // InitDist made the node-local group from distrun's layout (one node:
  // the world itself).
  EXPECT_EQ(*GetLocalRank(), atoi(getenv("LOCAL_RANK")));
  EXPECT_EQ(*GetLocalSize(), atoi(getenv("LOCAL_WORLD_SIZE")));
  EXPECT_EQ(GetLocalGroup()->get(), GetDefaultGroup().get());
  // "Nodes" of two ranks when the size is even, else one node: replaces it.
  const int per_node = W() % 2 == 0 ? 2 : W();
  ASSERT_TRUE(InitLocalGroup(R() / per_node, per_node).ok());
  EXPECT_EQ(*GetLocalRank(), R() % per_node);
  EXPECT_EQ(*GetLocalSize(), per_node);
  int64_t x = R();
  ASSERT_TRUE(AllReduce(TensorRef(&x, 1, DataType::kInt64), "sum",
                        GetLocalGroup()->get())
                  .ok());
  const int first = (R() / per_node) * per_node;
  EXPECT_EQ(x, per_node * first + per_node * (per_node - 1) / 2);
  ASSERT_TRUE(Barrier().ok());
}

TEST(DistApi, TensorCollectives) {
  // int64 mean truncates: values 1 + 2r.
  int64_t m = 1 + 2 * R();
  ASSERT_TRUE(AllReduce(TensorRef(&m, 1, DataType::kInt64), "Mean").ok());
  int64_t sum = 0;
  for (int r = 0; r < W(); ++r) sum += 1 + 2 * r;
  EXPECT_EQ(m, sum / W());
  // all_gather and gather into per-rank outputs.
  std::vector<float> mine(3, R() + 0.5f);
  std::vector<std::vector<float>> got(W(), std::vector<float>(3));
  std::vector<TensorRef> outs;
  for (auto& g : got)
    outs.push_back(TensorRef(g.data(), 3, DataType::kFloat32));
  ASSERT_TRUE(
      AllGather(TensorRef(mine.data(), 3, DataType::kFloat32), outs).ok());
  for (int r = 0; r < W(); ++r) EXPECT_EQ(got[r][2], r + 0.5f);
  for (auto& g : got) std::fill(g.begin(), g.end(), -1.0f);
  const int dst = W() - 1;
  ASSERT_TRUE(Gather(TensorRef(mine.data(), 3, DataType::kFloat32),
                     R() == dst ? outs : std::vector<TensorRef>{}, dst)
                  .ok());
  if (R() == dst) {
    for (int r = 0; r < W(); ++r) EXPECT_EQ(got[r][0], r + 0.5f);
  }
  // broadcast from the last rank.
  std::vector<int32_t> b(5, R());
  ASSERT_TRUE(Broadcast(TensorRef(b.data(), 5, DataType::kInt32), dst).ok());
  EXPECT_EQ(b, std::vector<int32_t>(5, dst));
  // sync_random_seed: the same value everywhere.
  absl::StatusOr<int32_t> seed = SyncRandomSeed();
  ASSERT_TRUE(seed.ok());
  std::vector<int32_t> seeds(W());
  std::vector<TensorRef> seed_outs;
  for (auto& s : seeds) seed_outs.push_back(TensorRef(&s, 1, DataType::kInt32));
  int32_t local = *seed;
  ASSERT_TRUE(
      AllGather(TensorRef(&local, 1, DataType::kInt32), seed_outs).ok());
  for (int32_t s : seeds) EXPECT_EQ(s, *seed);
  EXPECT_GE(*seed, 0);
}

TEST(DistApi, DictAndParams) {
  std::vector<double> loss = {1.0 + R()}, acc = {0.5 * R(), 2.0};
  std::map<std::string, TensorRef> d = {
      {"loss", TensorRef(loss.data(), 1, DataType::kFloat64)},
      {"acc", TensorRef(acc.data(), 2, DataType::kFloat64)}};
  ASSERT_TRUE(AllReduceDict(d, "mean").ok());
  const double n = W();
  EXPECT_DOUBLE_EQ(loss[0], 1.0 + (n - 1) / 2);
  EXPECT_DOUBLE_EQ(acc[0], 0.5 * (n - 1) / 2);
  EXPECT_DOUBLE_EQ(acc[1], 2.0);
  // Parameters of two dtypes, coalesced with and without a bucket limit, and
  // one by one.
  for (int mode = 0; mode < 3; ++mode) {
    std::vector<float> a(400000, R() + 1.0f), c(7, 2.0f * R());
    std::vector<int64_t> b(3, R());
    std::vector<TensorRef> params = {
        TensorRef(a.data(), a.size(), DataType::kFloat32),
        TensorRef(b.data(), b.size(), DataType::kInt64),
        TensorRef(c.data(), c.size(), DataType::kFloat32)};
    ASSERT_TRUE(
        AllReduceParams(params, /*coalesce=*/mode != 2, mode == 1 ? 1 : -1)
            .ok());
    EXPECT_EQ(a[399999], n * (n + 1) / 2);
    EXPECT_EQ(b[2], W() * (W() - 1) / 2);
    EXPECT_EQ(c[6], n * (n - 1));
  }
}

std::string ObjectOf(int r) {
  return std::string(r * 1000 + 1, static_cast<char>('a' + r));
}

TEST(DistApi, ObjectCollectives) {
  absl::StatusOr<std::vector<std::string>> all = AllGatherObject(ObjectOf(R()));
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(static_cast<int>(all->size()), W());
  for (int r = 0; r < W(); ++r) EXPECT_EQ((*all)[r], ObjectOf(r));
  auto gathered = GatherObject(ObjectOf(R()), 0);
  ASSERT_TRUE(gathered.ok());
  EXPECT_EQ(gathered->has_value(), R() == 0 || W() == 1);
  if (R() == 0) EXPECT_EQ((**gathered)[W() - 1], ObjectOf(W() - 1));
  std::vector<std::string> list;
  if (R() == 0) list = {"", "first", std::string(5000, 'z')};
  ASSERT_TRUE(BroadcastObjectList(&list, 0).ok());
  EXPECT_EQ(list,
            (std::vector<std::string>{"", "first", std::string(5000, 'z')}));
}

TEST(DistApi, CollectResults) {
  // 10 samples, round robin over W ranks, padded with empty items.
  const int64_t size = 10;
  const int64_t per_rank = (size + W() - 1) / W();
  ResultItems part;
  for (int64_t k = 0; k < per_rank; ++k) {
    const int64_t index = R() + k * W();
    part.push_back(index < size ? absl::StrCat("result-", index) : "");
  }
  ResultItems want;
  for (int64_t i = 0; i < size; ++i) want.push_back(absl::StrCat("result-", i));
  // cpu through a directory rank 0 makes; then through a supplied directory,
  // which is removed afterwards; then through the backend; then with tmpdir
  // "", the working directory (a directory of this test's, where the parts
  // are removed afterwards but not the directory).
  const std::string supplied =
      absl::StrCat(getenv("TEST_TMPDIR"), "/collect_dir");
  const std::string working = absl::StrCat(getenv("TEST_TMPDIR"), "/cwd");
  mkdir(working.c_str(), 0755);
  char* was = getcwd(nullptr, 0);
  ASSERT_NE(was, nullptr);
  const std::string old_cwd = was;
  free(was);
  for (int mode = 0; mode < 4; ++mode) {
    if (mode == 3) ASSERT_EQ(chdir(working.c_str()), 0);
    absl::StatusOr<std::optional<ResultItems>> got =
        mode == 0   ? CollectResults(part, size, "cpu")
        : mode == 1 ? CollectResults(part, size, "cpu", supplied)
        : mode == 2 ? CollectResults(part, size, "gpu")
                    : CollectResults(part, size, "cpu", std::string());
    if (mode == 3) ASSERT_EQ(chdir(old_cwd.c_str()), 0);
    ASSERT_TRUE(got.ok()) << got.status();
    if (R() == 0) {
      ASSERT_TRUE(got->has_value());
      EXPECT_EQ(**got, want) << "mode " << mode;
    } else {
      EXPECT_FALSE(got->has_value());
    }
    ASSERT_TRUE(Barrier().ok());
  }
  struct stat st;
  EXPECT_NE(stat(supplied.c_str(), &st), 0) << "the supplied tmpdir is removed";
  EXPECT_EQ(stat(working.c_str(), &st), 0) << "tmpdir \"\" stays";
  for (int r = 0; r < W(); ++r) {
    const std::string in_working = absl::StrCat(working, "/part_", r, ".bin");
    const std::string in_root = absl::StrCat("/part_", r, ".bin");
    EXPECT_NE(stat(in_working.c_str(), &st), 0) << in_working << " is removed";
    EXPECT_NE(stat(in_root.c_str(), &st), 0) << in_root << " was written";
  }
}

// The last rank refuses the call (a barrier, as distkit.dist's refusal
// makes): the others' call fails, and leaves nothing behind, neither the
// directory rank 0 made nor, in a supplied directory, this rank's part.
TEST(DistApi, CollectResultsRefusedLeavesNothing) {
  if (W() < 2) GTEST_SKIP() << "needs a peer";
  const bool refuses = R() == W() - 1;
  const std::string working =
      absl::StrCat(getenv("TEST_TMPDIR"), "/refused_cwd_", R());
  const std::string supplied =
      absl::StrCat(getenv("TEST_TMPDIR"), "/refused_dir");
  mkdir(working.c_str(), 0755);
  char* was = getcwd(nullptr, 0);
  ASSERT_NE(was, nullptr);
  const std::string old_cwd = was;
  free(was);
  const ResultItems part = {absl::StrCat("result-", R())};
  for (int mode = 0; mode < 2; ++mode) {
    if (refuses) {
      EXPECT_FALSE(Barrier().ok()) << "mode " << mode;
    } else {
      ASSERT_EQ(chdir(working.c_str()), 0);
      absl::StatusOr<std::optional<ResultItems>> got =
          mode == 0 ? CollectResults(part, W(), "cpu")
                    : CollectResults(part, W(), "cpu", supplied);
      ASSERT_EQ(chdir(old_cwd.c_str()), 0);
      EXPECT_FALSE(got.ok()) << "mode " << mode;
    }
    ASSERT_TRUE(Barrier().ok()) << "the group stays usable";
  }
  struct stat st;
  if (R() == 0) {
    const std::string made = absl::StrCat(working, "/.dist_test");
    std::vector<std::string> left;
    if (DIR* d = opendir(made.c_str())) {
      while (dirent* e = readdir(d)) {
        if (e->d_name[0] != '.') left.push_back(e->d_name);
      }
      closedir(d);
    }
    EXPECT_TRUE(left.empty()) << made << " keeps " << absl::StrJoin(left, " ");
  }
  const std::string mine = absl::StrCat(supplied, "/part_", R(), ".bin");
  EXPECT_NE(stat(mine.c_str(), &st), 0) << mine << " stays";
}

TEST(DistApi, ModeloptGroups) {
  ParallelState state;
  EXPECT_EQ(state.data_parallel_group.WorldSize(), W());
  EXPECT_EQ(state.data_parallel_group.Rank(), R());
  EXPECT_EQ(state.tensor_parallel_group.Rank(), -1);
  EXPECT_EQ(state.data_parallel_group.ToString(),
            absl::StrCat("group: None, initialized: True, world size: ", W()));
  // Chained sync: max over the world, then a concatenation over the pair
  // {0, 1} (skipped where it is unused).
  auto pair = GetDefaultGroup()->NewGroup(W() > 1 ? std::vector<int>{0, 1}
                                                  : std::vector<int>{0});
  ASSERT_TRUE(pair.ok());
  DistributedProcessGroup pair_group = (*pair)->is_member()
                                           ? DistributedProcessGroup(*pair)
                                           : DistributedProcessGroup::Unused();
  auto max_op = [](const std::vector<std::string>& v) {
    return *std::max_element(v.begin(), v.end());
  };
  absl::StatusOr<std::string> synced = DistributedProcessGroup::GetDistSyncdObj(
      absl::StrCat(R()), {state.data_parallel_group}, max_op);
  ASSERT_TRUE(synced.ok());
  EXPECT_EQ(*synced, absl::StrCat(W() - 1));
  synced = DistributedProcessGroup::GetDistSyncdObj(
      absl::StrCat(R()), {pair_group},
      [](const std::vector<std::string>& v) { return absl::StrJoin(v, "+"); });
  ASSERT_TRUE(synced.ok());
  if ((*pair)->is_member()) {
    EXPECT_EQ(*synced, W() > 1 ? "0+1" : "0");
  } else {
    EXPECT_EQ(*synced, absl::StrCat(R()));  // unchanged
  }
}

}  // namespace
}  // namespace dist
}  // namespace distkit

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (!distkit::testing::JoinDistJob("")) return 1;
  const int result = RUN_ALL_TESTS();
  (void)distkit::dist::Barrier();
  distkit::dist::DestroyDist();
  return result;
}
