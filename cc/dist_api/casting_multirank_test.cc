// mmengine's casting rule across a real job (world sizes 1-4), on a machine
// without a GPU: the group's comm device and the data's device differ, and
// the device that is not the host keeps its bytes transformed
// (testing/cc/extension_device.h), so a path that skips a copy, or hands the
// backend memory on the wrong device, computes wrong values or is refused.
//
//   casting_multirank_test ext_test   data on the host, comm device ext:0 (as
//   host
//                            objects and seeds reach NCCL on the GPU)
//   casting_multirank_test gloo       data on ext:0, comm device the host (as
//   CUDA
//                            tensors reach a Gloo group)
//
// Expected values are computed by each rank from formulas of (rank, index).

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cc/core/data_type.h"
#include "cc/core/half.h"
#include "cc/core/reduce_op.h"
#include "cc/dist_api/collectives.h"
#include "cc/dist_api/dist.h"
#include "cc/dist_api/object_collectives.h"
#include "gtest/gtest.h"
#include "testing/cc/dist_job.h"
#include "testing/cc/extension_device.h"
#include "testing/cc/typed_values.h"

namespace distkit {
namespace dist {
namespace {

using ::distkit::testing::ExtTensor;

std::string backend;  // argv[1]

int R() { return GetRank(); }
int W() { return GetWorldSize(); }

Device DataDevice() {
  return backend == "ext_test" ? Device::Cpu() : Device::Ext(0);
}

// A tensor of `T` on the data device, read back to the host by Values().
template <typename T>
class Data {
 public:
  explicit Data(const std::vector<T>& values) : host_(values) {
    if (DataDevice().is_cpu()) {
      ref_ = TensorRef(host_.data(), host_.size(), DataTypeOf());
      return;
    }
    absl::StatusOr<ExtTensor> ext = ::distkit::testing::ToExtension(
        values.data(), values.size(), DataTypeOf());
    EXPECT_TRUE(ext.ok()) << ext.status();
    ext_ = *std::move(ext);
    ref_ = ext_.ref;
  }
  const TensorRef& ref() const { return ref_; }
  std::vector<T> Values() const {
    if (DataDevice().is_cpu()) return host_;
    std::vector<T> out(host_.size());
    EXPECT_TRUE(::distkit::testing::FromExtension(ref_, out.data()).ok());
    return out;
  }
  static DataType DataTypeOf() {
    if (std::is_same_v<T, float>) return DataType::kFloat32;
    if (std::is_same_v<T, double>) return DataType::kFloat64;
    if (std::is_same_v<T, int32_t>) return DataType::kInt32;
    if (std::is_same_v<T, int64_t>) return DataType::kInt64;
    return DataType::kUInt8;
  }

 private:
  std::vector<T> host_;
  ExtTensor ext_;
  TensorRef ref_;
};

// Bytes of any dtype on the data device, written and read on the host as
// doubles (every value used is exact in every dtype).
class AnyData {
 public:
  AnyData(DataType dtype, const std::vector<double>& values)
      : dtype_(dtype),
        numel_(values.size()),
        host_(values.size() * ElementSize(dtype)) {
    for (size_t i = 0; i < values.size(); ++i) Set(i, values[i]);
    if (DataDevice().is_cpu()) {
      ref_ = TensorRef(host_.data(), numel_, dtype_);
      return;
    }
    absl::StatusOr<ExtTensor> ext =
        ::distkit::testing::ToExtension(host_.data(), numel_, dtype_);
    EXPECT_TRUE(ext.ok()) << ext.status();
    ext_ = *std::move(ext);
    ref_ = ext_.ref;
  }
  const TensorRef& ref() const { return ref_; }
  std::vector<double> Values() {
    if (!DataDevice().is_cpu()) {
      EXPECT_TRUE(::distkit::testing::FromExtension(ref_, host_.data()).ok());
    }
    std::vector<double> out(numel_);
    for (size_t i = 0; i < numel_; ++i) out[i] = Get(i);
    return out;
  }

 private:
  void Set(size_t i, double v) {
    ::distkit::testing::SetElement(host_.data(), dtype_, i, v);
  }
  double Get(size_t i) const {
    return ::distkit::testing::GetElement(host_.data(), dtype_, i);
  }

  DataType dtype_;
  size_t numel_;
  std::vector<char> host_;
  ExtTensor ext_;
  TensorRef ref_;
};

// Rank r's element i for `op` on `dtype`, chosen so that every result is
// exact in every dtype at world size <= 4 (products of 1 and 2 fit int8).
double Value(DataType dtype, ReduceOp op, int r, int i) {
  if (dtype == DataType::kBool) return (r + i) % 3 == 0;
  switch (op) {
    case ReduceOp::kProduct:
      return (r + i) % 3 == 0 ? 2 : 1;
    case ReduceOp::kBand:
    case ReduceOp::kBor:
    case ReduceOp::kBxor:
      return (r * 37 + i * 11) & 0x7f;
    default:
      return 1 + (r + i) % 4;
  }
}

// Every rank's Value reduced here, without the library: bool reduces as
// logic (product, min and band: all; bxor: parity; the others: any); an
// integer mean truncates, as mmengine's does.
double Expected(DataType dtype, ReduceOp op, int i) {
  const double reduced = ::distkit::testing::ReduceOverRanks(
      dtype, op, W(), [&](int r) { return Value(dtype, op, r, i); });
  if (op != ReduceOp::kMean || dtype == DataType::kBool) return reduced;
  const int64_t acc = static_cast<int64_t>(reduced);
  if (!IsFloatingPoint(dtype)) return static_cast<double>(acc / W());
  // The quotient rounded once to the dtype (8/3 is not exact in any of them).
  const float quotient = static_cast<float>(static_cast<double>(acc) / W());
  switch (dtype) {
    case DataType::kFloat16:
      return Float16ToFloat(FloatToFloat16(quotient));
    case DataType::kBFloat16:
      return BFloat16ToFloat(FloatToBFloat16(quotient));
    case DataType::kFloat32:
      return quotient;
    default:
      return static_cast<double>(acc) / W();
  }
}

TEST(Casting, DevicesDiffer) {
  EXPECT_EQ(GetCommDevice(),
            backend == "ext_test" ? Device::Ext(0) : Device::Cpu());
  EXPECT_NE(GetCommDevice(), DataDevice());
}

TEST(Casting, TheBackendRefusesDataOffItsDevice) {
  // Without the rule, the group itself refuses: the rule is what makes the
  // other tests pass.
  std::vector<float> v(4, 1.0f);
  Data<float> d(v);
  absl::Status s = GetDefaultGroup()->AllReduce(d.ref(), ReduceOp::kSum);
  if (W() == 1 && backend == "gloo") return;  // gloo does not look at ws 1
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

// Every dtype and every op through the casting rule. An op a dtype does not
// support (bitwise on floating point) is refused on every rank (in a group
// of more than one), and the data is left as it was.
TEST(Casting, AllReduceEveryDtypeAndOp) {
  for (DataType dtype : kAllDataTypes) {
    for (ReduceOp op : kAllReduceOps) {
      const std::string what =
          absl::StrCat(ReduceOpName(op), " on ", DataTypeName(dtype));
      std::vector<double> mine(37);
      for (int i = 0; i < 37; ++i) mine[i] = Value(dtype, op, R(), i);
      AnyData d(dtype, mine);
      absl::Status s = AllReduce(d.ref(), std::string(ReduceOpName(op)));
      if (!CheckReduceOpSupported(op, dtype).ok()) {
        // mmengine returns before looking at anything in a group of one.
        EXPECT_EQ(s.code(), W() == 1 ? absl::StatusCode::kOk
                                     : absl::StatusCode::kInvalidArgument)
            << what << ": " << s;
        EXPECT_EQ(d.Values(), mine) << what << ": refused data is unchanged";
        continue;
      }
      ASSERT_TRUE(s.ok()) << what << ": " << s;
      const std::vector<double> got = d.Values();
      for (int i = 0; i < 37; ++i) {
        ASSERT_EQ(got[i], Expected(dtype, op, i)) << what << " at " << i;
      }
    }
  }
}

TEST(Casting, Broadcast) {
  const int src = W() - 1;
  Data<int64_t> d(std::vector<int64_t>(9, 100 + R()));
  ASSERT_TRUE(Broadcast(d.ref(), src).ok());
  EXPECT_EQ(d.Values(), std::vector<int64_t>(9, 100 + src));
}

TEST(Casting, AllGatherAndGather) {
  Data<float> mine(std::vector<float>(5, R() + 0.25f));
  std::vector<Data<float>> outs;
  for (int r = 0; r < W(); ++r) outs.emplace_back(std::vector<float>(5, -1));
  std::vector<TensorRef> refs;
  for (auto& o : outs) refs.push_back(o.ref());
  ASSERT_TRUE(AllGather(mine.ref(), refs).ok());
  for (int r = 0; r < W(); ++r) {
    EXPECT_EQ(outs[r].Values(), std::vector<float>(5, r + 0.25f)) << r;
  }
  std::vector<Data<float>> gathered;
  for (int r = 0; r < W(); ++r) {
    gathered.emplace_back(std::vector<float>(5, -1));
  }
  refs.clear();
  for (auto& o : gathered) refs.push_back(o.ref());
  const int dst = W() - 1;
  ASSERT_TRUE(
      Gather(mine.ref(), R() == dst ? refs : std::vector<TensorRef>{}, dst)
          .ok());
  for (int r = 0; r < W(); ++r) {
    EXPECT_EQ(gathered[r].Values(),
              std::vector<float>(5, R() == dst ? r + 0.25f : -1.0f))
        << r;
  }
}

TEST(Casting, ParamsAndDict) {
  for (int mode = 0; mode < 2; ++mode) {
    Data<float> a(std::vector<float>(1000, R() + 1.0f));
    Data<float> b(std::vector<float>(3, 2.0f * R()));
    ASSERT_TRUE(
        AllReduceParams({a.ref(), b.ref()}, /*coalesce=*/mode == 0, -1).ok());
    const float n = W();
    EXPECT_EQ(a.Values(), std::vector<float>(1000, n * (n + 1) / 2)) << mode;
    EXPECT_EQ(b.Values(), std::vector<float>(3, n * (n - 1))) << mode;
  }
  Data<double> loss(std::vector<double>{1.0 + R()});
  ASSERT_TRUE(AllReduceDict({{"loss", loss.ref()}}, "mean").ok());
  EXPECT_DOUBLE_EQ(loss.Values()[0], 1.0 + (W() - 1) / 2.0);
}

TEST(Casting, ObjectsAndSeedTravelThroughTheCommDevice) {
  auto all = AllGatherObject(std::string(R() * 300 + 1, 'a' + R()));
  ASSERT_TRUE(all.ok()) << all.status();
  for (int r = 0; r < W(); ++r) {
    EXPECT_EQ((*all)[r], std::string(r * 300 + 1, 'a' + r));
  }
  auto gathered = GatherObject(absl::StrCat("rank", R()), 0);
  ASSERT_TRUE(gathered.ok()) << gathered.status();
  if (R() == 0) EXPECT_EQ((**gathered)[W() - 1], absl::StrCat("rank", W() - 1));
  std::vector<std::string> list;
  if (R() == 0) list = {"x", std::string(700, 'y')};
  ASSERT_TRUE(BroadcastObjectList(&list, 0).ok());
  EXPECT_EQ(list, (std::vector<std::string>{"x", std::string(700, 'y')}));
  absl::StatusOr<int32_t> seed = SyncRandomSeed();
  ASSERT_TRUE(seed.ok()) << seed.status();
  auto seeds = AllGatherObject(absl::StrCat(*seed));
  ASSERT_TRUE(seeds.ok());
  for (const std::string& s : *seeds) EXPECT_EQ(s, absl::StrCat(*seed));
}

TEST(Casting, AnObjectTooLargeForOneRanksDeviceFailsEveryRank) {
  if (backend != "ext_test" || W() == 1) GTEST_SKIP() << "no staging here";
  // The last rank's "GPU" holds at most 1 MiB per allocation.
  if (R() == W() - 1) ::distkit::testing::SetExtensionDeviceLimit(1 << 20);
  const absl::Time start = absl::Now();
  auto all = AllGatherObject(std::string(R() == 0 ? 2 << 20 : 10, 'x'));
  ::distkit::testing::SetExtensionDeviceLimit(0);
  ASSERT_FALSE(all.ok());
  EXPECT_EQ(all.status().code(), absl::StatusCode::kResourceExhausted)
      << all.status();
  EXPECT_NE(all.status().message().find(absl::StrCat("rank(s) ", W() - 1)),
            absl::string_view::npos)
      << all.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  // Nothing was left half-done: the group goes on.
  auto small = AllGatherObject(absl::StrCat(R()));
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ((*small)[W() - 1], absl::StrCat(W() - 1));
}

}  // namespace
}  // namespace dist
}  // namespace distkit

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const std::optional<std::string> backend =
      distkit::testing::BackendArgument(argc, argv, {"ext_test", "gloo"});
  if (!backend) return 2;
  distkit::dist::backend = *backend;
  distkit::testing::InstallXorExtensionDevice();
  if (!distkit::testing::JoinDistJob(*backend)) return 1;
  const int result = RUN_ALL_TESTS();
  (void)distkit::dist::Barrier();
  distkit::dist::DestroyDist();
  return result;
}
