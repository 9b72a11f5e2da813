// Every buffer the C++ "distkit" backend makes (flat all_gather, gather and
// all_to_all outputs, staged copies of non-contiguous tensors) is on its
// input's device. Debian's torch cannot make CUDA tensors, so meta tensors
// stand in for "not the CPU": the process group records the device of each
// tensor it would lend the library instead of calling it (a CPU buffer
// beside CUDA inputs is what broke torch's DDP construction on CUDA).

#include <dlfcn.h>

#include <string>
#include <vector>

#include "bindings/python/c10d/dk_api.h"
#include "bindings/python/c10d/process_group_distkit.h"
#include "gtest/gtest.h"

namespace distkit {
namespace c10d_ext {
namespace {

std::string library_path;

class DevicesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    void* library = dlopen(library_path.c_str(), RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(library, nullptr) << dlerror();
    LoadDkApi(library);
  }

  void SetUp() override {
    pg_ = c10::make_intrusive<ProcessGroupDistkit>(0, 3, nullptr);
    pg_->set_record_lends(true);
  }

  static at::Tensor Meta(std::vector<int64_t> shape) {
    return at::empty(shape, at::TensorOptions().device(at::kMeta));
  }
  static std::vector<at::Tensor> Metas(int n, std::vector<int64_t> shape) {
    std::vector<at::Tensor> ts;
    for (int i = 0; i < n; ++i) ts.push_back(Meta(shape));
    return ts;
  }

  // Every tensor `op` lent was a meta tensor, and it lent at least one.
  void ExpectAllMeta(const std::string& op) {
    std::vector<std::string> lent = pg_->TakeRecordedLends();
    EXPECT_FALSE(lent.empty()) << op;
    for (const std::string& device : lent) {
      EXPECT_EQ(device, "meta") << op << " lent a " << device << " tensor";
    }
  }

  c10::intrusive_ptr<ProcessGroupDistkit> pg_;
};

TEST_F(DevicesTest, EveryOperationKeepsTheInputsDevice) {
  std::vector<at::Tensor> x = {Meta({4})};
  // Non-contiguous: staged through a copy, which must stay on the device.
  std::vector<at::Tensor> strided = {Meta({4, 2}).t()};
  pg_->allreduce(x, {})->wait();
  ExpectAllMeta("allreduce");
  pg_->allreduce(strided, {})->wait();
  ExpectAllMeta("allreduce, non-contiguous");
  std::vector<at::Tensor> several = Metas(3, {2});
  pg_->allreduce_coalesced(several, {})->wait();
  ExpectAllMeta("allreduce_coalesced");
  pg_->broadcast(strided, {})->wait();
  ExpectAllMeta("broadcast");
  pg_->reduce(x, {})->wait();
  ExpectAllMeta("reduce");
  std::vector<std::vector<at::Tensor>> outs = {Metas(3, {4})};
  pg_->allgather(outs, x, {})->wait();
  ExpectAllMeta("allgather");
  at::Tensor flat = Meta({12});
  pg_->_allgather_base(flat, x[0], {})->wait();
  ExpectAllMeta("_allgather_base");
  std::vector<std::vector<at::Tensor>> lists = {Metas(3, {2}), Metas(3, {2}),
                                                Metas(3, {2})};
  pg_->allgather_coalesced(lists, several, {})->wait();
  ExpectAllMeta("allgather_coalesced");
  c10d::GatherOptions gather;
  gather.rootRank = 0;
  pg_->gather(outs, x, gather)->wait();
  ExpectAllMeta("gather");
  c10d::ScatterOptions scatter;
  scatter.rootRank = 0;
  std::vector<std::vector<at::Tensor>> ins = {Metas(3, {4})};
  pg_->scatter(x, ins, scatter)->wait();
  ExpectAllMeta("scatter");
  pg_->reduce_scatter(x, ins, {})->wait();
  ExpectAllMeta("reduce_scatter");
  pg_->_reduce_scatter_base(x[0], flat, {})->wait();
  ExpectAllMeta("_reduce_scatter_base");
  at::Tensor a = Meta({6}), b = Meta({6});
  std::vector<int64_t> none;
  pg_->alltoall_base(a, b, none, none, {})->wait();
  ExpectAllMeta("alltoall_base");
  std::vector<int64_t> splits = {1, 2, 3};
  pg_->alltoall_base(a, b, splits, splits, {})->wait();
  ExpectAllMeta("alltoall_base, uneven");
  std::vector<at::Tensor> to = Metas(3, {2}), from = Metas(3, {2});
  pg_->alltoall(to, from, {})->wait();
  ExpectAllMeta("alltoall");
  pg_->send(strided, 1, 0)->wait();
  ExpectAllMeta("send");
  pg_->recv(strided, 1, 0)->wait();
  ExpectAllMeta("recv");
}

TEST_F(DevicesTest, FuturesHoldTheOutputs) {
  std::vector<at::Tensor> outs = Metas(3, {4});
  std::vector<std::vector<at::Tensor>> lists = {outs};
  std::vector<at::Tensor> x = {Meta({4})};
  auto work = pg_->allgather(lists, x, {});
  auto future = work->getFuture();
  future->wait();
  std::vector<at::Tensor> value = future->value().toTensorVector();
  ASSERT_EQ(value.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(value[i].is_same(outs[i]));
  EXPECT_TRUE(work->isCompleted());
  EXPECT_TRUE(work->isSuccess());
  pg_->TakeRecordedLends();
}

}  // namespace
}  // namespace c10d_ext
}  // namespace distkit

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc != 2) {
    fprintf(stderr, "usage: %s LIBDISTKIT_SO\n", argv[0]);
    return 2;
  }
  distkit::c10d_ext::library_path = argv[1];
  return RUN_ALL_TESTS();
}
