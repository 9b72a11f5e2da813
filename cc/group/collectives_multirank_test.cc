// Every collective of ProcessGroup over Gloo, run by each rank of a real job
// (dk_multirank_test, world sizes 1-4). Each rank fills its inputs from a
// formula of (rank, index) and computes the expected results itself from the
// same formula for every rank, so nothing is taken from the library under test.

#include <dirent.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "testing/cc/multirank_gtest.h"
#include "testing/cc/typed_values.h"

namespace distkit {
namespace {

using testing::Rank;
using testing::Size;
using testing::World;

// Every input and result below repeats in its index with this period (the
// lcm of 3, 11 and 128: see ValueFormula), so a buffer is filled by setting
// one period and copying its bytes, and looked up in one period's table.
constexpr int64_t kPeriod = 3 * 11 * 128;

// A typed buffer read and written as doubles.
class Buffer {
 public:
  Buffer(DataType dt, int64_t n)
      : dt_(dt), n_(n), esize_(ElementSize(dt)), bytes_(n * esize_ + 1) {}
  TensorRef ref() { return TensorRef(bytes_.data(), n_, dt_); }
  int64_t size() const { return n_; }
  void Set(int64_t i, double v) {
    ::distkit::testing::SetElement(bytes_.data(), dt_, i, v);
  }
  // Element i = f(i) for every i, for an f that repeats with kPeriod: one
  // period through Set, the rest copies of its bytes.
  template <typename F>
  void FillPeriodic(F f) {
    for (int64_t i = 0; i < std::min(n_, kPeriod); ++i) Set(i, f(i));
    for (int64_t at = kPeriod; at < n_; at += kPeriod) {
      std::memcpy(bytes_.data() + at * esize_, bytes_.data(),
                  std::min(kPeriod, n_ - at) * esize_);
    }
  }
  // Whether `count` elements from `at` hold the same bytes as `other`'s from
  // `other_at`: the fast path of a check, whose element-wise comparison runs
  // only when they do not.
  bool SameBytes(int64_t at, const Buffer& other, int64_t other_at,
                 int64_t count) const {
    return std::memcmp(bytes_.data() + at * esize_,
                       other.bytes_.data() + other_at * esize_,
                       count * esize_) == 0;
  }
  double Get(int64_t i) const {
    return ::distkit::testing::GetElement(bytes_.data(), dt_, i);
  }

 private:
  DataType dt_;
  int64_t n_;
  size_t esize_;
  std::vector<char> bytes_;
};

// Input of rank r at index i for (dtype, op), chosen so every result is exact
// in every dtype at world size <= 4.
double ValueFormula(DataType dt, ReduceOp op, int r, int64_t i) {
  if (dt == DataType::kBool) return (r + i) % 3 == 0 ? 1 : 0;
  switch (op) {
    case ReduceOp::kProduct: {
      const int k = (r + i) % 3;
      if (dt == DataType::kUInt8) return k == 0 ? 2 : 1;
      return k == 0 ? 2 : (k == 1 ? 1 : -1);
    }
    case ReduceOp::kBand:
    case ReduceOp::kBor:
    case ReduceOp::kBxor:
      return (r * 37 + i * 11) & 0x7f;
    default:
      if (dt == DataType::kUInt8) return (r * 3 + i) % 11;
      return (r * 3 + i) % 11 - 5;
  }
}

// The checks below look values and results up in one period's table, built
// from the formulas, instead of evaluating them for millions of elements.
// One period of f(i), for the key (dtype, op, k) it was built for: the last
// table used is kept at hand (loops use one key at a time), the others in a
// map.
template <typename Formula>
double FromTable(DataType dt, ReduceOp op, int k, int64_t i, Formula f) {
  using Key = std::tuple<int, int, int>;
  struct KeyHash {
    size_t operator()(const Key& key) const {
      return std::get<0>(key) * 1000003u + std::get<1>(key) * 1009u +
             std::get<2>(key);
    }
  };
  thread_local std::unordered_map<Key, std::vector<double>, KeyHash> tables;
  thread_local const std::vector<double>* last = nullptr;
  thread_local Key last_key;
  const Key key{static_cast<int>(dt), static_cast<int>(op), k};
  if (last == nullptr || key != last_key) {
    std::vector<double>& table = tables[key];
    if (table.empty()) {
      table.resize(kPeriod);
      for (int64_t j = 0; j < kPeriod; ++j) table[j] = f(j);
    }
    last = &table;
    last_key = key;
  }
  return (*last)[i % kPeriod];
}

double ExpectedFormula(DataType dt, ReduceOp op, int64_t i, int n);

double Value(DataType dt, ReduceOp op, int r, int64_t i) {
  return FromTable(dt, op, r, i,
                   [&](int64_t j) { return ValueFormula(dt, op, r, j); });
}

// The reduction of every rank's Value, computed here without the library.
double Expected(DataType dt, ReduceOp op, int64_t i, int n) {
  // Keys of results (n ranks) apart from values' (rank r): -1 - n.
  return FromTable(dt, op, -1 - n, i,
                   [&](int64_t j) { return ExpectedFormula(dt, op, j, n); });
}

double ExpectedFormula(DataType dt, ReduceOp op, int64_t i, int n) {
  const double reduced = ::distkit::testing::ReduceOverRanks(
      dt, op, n, [&](int r) { return ValueFormula(dt, op, r, i); });
  if (op != ReduceOp::kMean || dt == DataType::kBool) return reduced;
  const int64_t acc = static_cast<int64_t>(reduced);
  if (IsFloatingPoint(dt)) return static_cast<double>(acc) / n;
  return static_cast<double>(acc / n);  // truncation toward zero, as mmengine
}

bool Close(double got, double want, DataType dt) {
  double tol = 0;
  if (dt == DataType::kFloat16) tol = std::abs(want) * 1e-3;
  if (dt == DataType::kBFloat16) tol = std::abs(want) * 8e-3;
  if (dt == DataType::kFloat32) tol = std::abs(want) * 1e-6;
  return std::abs(got - want) <= tol;
}

// ASSERT_EQ for the element loops: gtest's comparison is an out-of-line call
// per element, so equal values take a plain comparison first.
#define ASSERT_SAME(got, want)                                    \
  if (const double got_ = (got), want_ = (want); got_ == want_) { \
  } else                                                          \
    ASSERT_EQ(got_, want_)

// The description is built only for a failure: these loops check millions of
// elements.
#define EXPECT_CLOSE(got, want, dt, where)                                  \
  do {                                                                      \
    const double got_ = (got), want_ = (want);                              \
    if (!Close(got_, want_, dt)) {                                          \
      ADD_FAILURE() << where << ": got " << got_ << ", expected " << want_; \
      return;                                                               \
    }                                                                       \
  } while (0)

// Over TCP, up to 1 MiB / (size - 1) per rank travels inline with the
// signature exchange; larger buffers go through Gloo's own algorithms (1.1M
// elements is past the limit for every dtype and size). On shared memory,
// all_reduce and reduce of up to 16 KiB take one step, carried with the
// signatures (4097 float32 is just past it, 16384 uint8 just at it), larger
// ones go by slices of 1 MiB chunks (262147 float32 leaves 3 elements for the
// last chunk: some ranks' slices are empty); a broadcast's chunks grow from
// 64 KiB (16384 float32, carried with the signatures) and double to 1 MiB
// (262147 float32 is 64+128+256+512 KiB and a last chunk of 64 KiB + 12
// bytes), and the other collectives move 1 MiB / size regions per round.
// Test them all.
const int64_t kAllCounts[] = {1, 5, 3000, 4097, 16384, 262147, 1100000};

// DISTKIT_TEST_SWEEP=branches, set by the ThreadSanitizer run (which runs
// this program on shared memory): every count above but 1100000, whose
// threshold is TCP's, and one dtype of each element size where a test
// sweeps every dtype, and (RootsFor) fewer roots at the largest count. TSan
// looks for races between threads, which every branch still reaches; the
// values of every dtype are checked by the plain runs.
bool BranchSweep() {
  static const bool branches = [] {
    const char* sweep = std::getenv("DISTKIT_TEST_SWEEP");
    return sweep != nullptr && std::string(sweep) == "branches";
  }();
  return branches;
}

const std::vector<int64_t>& Counts() {
  static const std::vector<int64_t> counts = [] {
    std::vector<int64_t> c(std::begin(kAllCounts), std::end(kAllCounts));
    if (BranchSweep()) c.pop_back();
    return c;
  }();
  return counts;
}

// The roots a rooted test takes at count `n`: every rank, but in the branch
// sweep at its largest count only the two lowest and the two highest ranks
// (with the hosts' ranks in a row: the first host's leader and another rank,
// the last host's leader among the last two). Every root takes every smaller
// count, from 3000 up the pipelined tests' chunked path too, so the branches
// stay reached; the rest repeated the largest transfer once per root (at 8
// ranks, half of a pipelined test's time).
std::vector<int> RootsFor(int64_t n) {
  std::vector<int> roots;
  for (int root = 0; root < Size(); ++root) {
    const bool edge = root < 2 || root >= Size() - 2;
    if (!BranchSweep() || n != Counts().back() || edge) roots.push_back(root);
  }
  return roots;
}

const std::vector<DataType>& SweptDataTypes() {
  static const std::vector<DataType> dtypes = [] {
    if (BranchSweep()) {
      return std::vector<DataType>{DataType::kUInt8, DataType::kFloat16,
                                   DataType::kFloat32, DataType::kFloat64};
    }
    return std::vector<DataType>(std::begin(kAllDataTypes),
                                 std::end(kAllDataTypes));
  }();
  return dtypes;
}

TEST(Collectives, AllReduceEveryDtypeAndOp) {
  for (DataType dt : SweptDataTypes()) {
    for (ReduceOp op : kAllReduceOps) {
      if (!CheckReduceOpSupported(op, dt).ok()) continue;
      for (int64_t n : Counts()) {
        Buffer b(dt, n);
        b.FillPeriodic([&](int64_t i) { return Value(dt, op, Rank(), i); });
        ASSERT_TRUE(World().AllReduce(b.ref(), op).ok());
        Buffer want(dt, n);
        want.FillPeriodic(
            [&](int64_t i) { return Expected(dt, op, i, Size()); });
        if (b.SameBytes(0, want, 0, n)) continue;
        for (int64_t i = 0; i < n; ++i) {
          EXPECT_CLOSE(b.Get(i), Expected(dt, op, i, Size()), dt,
                       absl::StrCat(DataTypeName(dt), " ", ReduceOpName(op),
                                    " n=", n, " i=", i));
        }
      }
    }
  }
}

TEST(Collectives, MmengineIntegerMeanTruncates) {
  // mmengine: int64 [1,2] and [3,4] with mean -> [2,3]; a sum of 5 over 2 -> 2.
  std::vector<int64_t> v = {1 + 2 * Rank(), 2 + 2 * Rank(),
                            Rank() == 0 ? 2 : 3};
  ASSERT_TRUE(
      World()
          .AllReduce(TensorRef(v.data(), 3, DataType::kInt64), ReduceOp::kMean)
          .ok());
  if (Size() == 2) {
    EXPECT_EQ(v, (std::vector<int64_t>{2, 3, 2}));
  }
  int64_t sum = 0;
  for (int r = 0; r < Size(); ++r) sum += 1 + 2 * r;
  EXPECT_EQ(v[0], sum / Size());
}

TEST(Collectives, BitwiseOnFloatIsAnErrorNamingOpAndDtype) {
  float f = 1;
  absl::Status s =
      World().AllReduce(TensorRef(&f, 1, DataType::kFloat32), ReduceOp::kBxor);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("bxor"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("float32"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("all_reduce on group 'world'"),
            absl::string_view::npos)
      << s;
}

TEST(Collectives, BroadcastFromEveryRoot) {
  for (DataType dt : SweptDataTypes()) {
    for (int64_t n : Counts()) {
      for (int root = 0; root < Size(); ++root) {
        Buffer b(dt, n);
        b.FillPeriodic([&](int64_t i) {
          return Rank() == root ? Value(dt, ReduceOp::kMax, root, i) : 0;
        });
        ASSERT_TRUE(World().Broadcast(b.ref(), root).ok());
        Buffer want(dt, n);
        want.FillPeriodic(
            [&](int64_t i) { return Value(dt, ReduceOp::kMax, root, i); });
        if (b.SameBytes(0, want, 0, n)) continue;
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_SAME(b.Get(i), want.Get(i))
              << DataTypeName(dt) << " root=" << root << " i=" << i;
        }
      }
    }
  }
}

TEST(Collectives, ReduceToEveryRoot) {
  for (DataType dt :
       {DataType::kFloat32, DataType::kInt64, DataType::kBFloat16}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMean}) {
      for (int64_t n : Counts()) {
        for (int root : RootsFor(n)) {
          Buffer b(dt, n);
          b.FillPeriodic([&](int64_t i) { return Value(dt, op, Rank(), i); });
          ASSERT_TRUE(World().Reduce(b.ref(), op, root).ok());
          Buffer want(dt, n);
          want.FillPeriodic([&](int64_t i) {
            return Rank() == root ? Expected(dt, op, i, Size())
                                  : Value(dt, op, Rank(), i);
          });
          if (b.SameBytes(0, want, 0, n)) continue;
          for (int64_t i = 0; i < n; ++i) {
            const double want = Rank() == root ? Expected(dt, op, i, Size())
                                               : Value(dt, op, Rank(), i);
            EXPECT_CLOSE(b.Get(i), want, dt,
                         absl::StrCat("reduce root=", root, " i=", i));
          }
        }
      }
    }
  }
}

TEST(Collectives, AllGatherGatherScatter) {
  for (DataType dt : {DataType::kFloat64, DataType::kInt8, DataType::kFloat16,
                      DataType::kBool}) {
    for (int64_t n : Counts()) {
      Buffer in(dt, n), out(dt, n * Size());
      in.FillPeriodic(
          [&](int64_t i) { return Value(dt, ReduceOp::kSum, Rank(), i); });
      ASSERT_TRUE(World().AllGather(in.ref(), out.ref()).ok());
      for (int r = 0; r < Size(); ++r) {
        Buffer e(dt, n);
        e.FillPeriodic(
            [&](int64_t i) { return Value(dt, ReduceOp::kSum, r, i); });
        if (out.SameBytes(r * n, e, 0, n)) continue;
        for (int64_t i = 0; i < n; ++i)
          ASSERT_SAME(out.Get(r * n + i), e.Get(i));
      }
      // Into a list of tensors.
      std::vector<Buffer> parts(Size(), Buffer(dt, n));
      std::vector<TensorRef> refs;
      for (Buffer& p : parts) refs.push_back(p.ref());
      ASSERT_TRUE(World().AllGather(in.ref(), refs).ok());
      for (int r = 0; r < Size(); ++r) {
        if (parts[r].SameBytes(0, out, r * n, n)) continue;
        for (int64_t i = 0; i < n; ++i)
          ASSERT_SAME(parts[r].Get(i), out.Get(r * n + i));
      }
      for (int root = 0; root < Size(); ++root) {
        Buffer g(dt, n * Size());
        ASSERT_TRUE(World().Gather(in.ref(), g.ref(), root).ok());
        if (Rank() == root && !g.SameBytes(0, out, 0, n * Size())) {
          for (int64_t i = 0; i < n * Size(); ++i)
            ASSERT_SAME(g.Get(i), out.Get(i));
        }
        // Scatter the gathered buffer back out from the same root.
        Buffer s(dt, n);
        ASSERT_TRUE(World().Scatter(g.ref(), s.ref(), root).ok());
        if (s.SameBytes(0, in, 0, n)) continue;
        for (int64_t i = 0; i < n; ++i) ASSERT_SAME(s.Get(i), in.Get(i));
      }
    }
  }
}

// FSDP's form: each rank's input is its own part of the output.
TEST(Collectives, AllGatherInPlace) {
  for (DataType dt : {DataType::kFloat32, DataType::kUInt8}) {
    for (int64_t n : Counts()) {
      Buffer out(dt, n * Size());
      for (int64_t i = 0; i < n * Size(); ++i) out.Set(i, 0);
      for (int64_t i = 0; i < n; ++i)
        out.Set(Rank() * n + i, Value(dt, ReduceOp::kSum, Rank(), i));
      char* own =
          static_cast<char*>(out.ref().data()) + Rank() * n * ElementSize(dt);
      ASSERT_TRUE(World().AllGather(TensorRef(own, n, dt), out.ref()).ok());
      for (int r = 0; r < Size(); ++r) {
        Buffer e(dt, n);
        for (int64_t i = 0; i < n; ++i)
          e.Set(i, Value(dt, ReduceOp::kSum, r, i));
        for (int64_t i = 0; i < n; ++i)
          ASSERT_SAME(out.Get(r * n + i), e.Get(i))
              << DataTypeName(dt) << " n=" << n << " part " << r;
      }
    }
  }
}

// An input inside another rank's part of the output: what it held is sent,
// not what the peers write over it.
TEST(Collectives, AllGatherInputInsideAnotherPart) {
  const DataType dt = DataType::kFloat32;
  for (int64_t n : Counts()) {
    Buffer out(dt, n * Size());
    const int at = (Rank() + 1) % Size();
    for (int64_t i = 0; i < n; ++i)
      out.Set(at * n + i, Value(dt, ReduceOp::kSum, Rank(), i));
    char* input = static_cast<char*>(out.ref().data()) + at * n * 4;
    ASSERT_TRUE(World().AllGather(TensorRef(input, n, dt), out.ref()).ok());
    for (int r = 0; r < Size(); ++r) {
      for (int64_t i = 0; i < n; ++i)
        ASSERT_SAME(out.Get(r * n + i),
                    static_cast<float>(Value(dt, ReduceOp::kSum, r, i)))
            << "n=" << n << " part " << r;
    }
  }
}

// torch's in-place form: the output is this rank's part of the input.
TEST(Collectives, ReduceScatterOutputInsideInput) {
  const DataType dt = DataType::kFloat32;
  for (int64_t n : Counts()) {
    Buffer in(dt, n * Size());
    for (int64_t i = 0; i < n * Size(); ++i)
      in.Set(i, Value(dt, ReduceOp::kSum, Rank(), i));
    char* output = static_cast<char*>(in.ref().data()) + Rank() * n * 4;
    ASSERT_TRUE(
        World()
            .ReduceScatter(in.ref(), TensorRef(output, n, dt), ReduceOp::kSum)
            .ok());
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_CLOSE(in.Get(Rank() * n + i),
                   Expected(dt, ReduceOp::kSum, Rank() * n + i, Size()), dt,
                   absl::StrCat("n=", n, " i=", i));
    }
  }
}

// Gathers every rank's values to `root`, the root's input being `n`
// elements of `all` from element `at`, and checks them there; then scatters
// them back out, the root's output at the same place, and checks this rank's
// part. Every rank's `in` and the root's `all` from `at` hold its values.
void GatherThenScatterAtTheRoot(Buffer& in, Buffer& all, int64_t n, int root,
                                int64_t at) {
  const DataType dt = DataType::kFloat32;
  char* inside = static_cast<char*>(all.ref().data()) + at * 4;
  TensorRef input = Rank() == root ? TensorRef(inside, n, dt) : in.ref();
  ASSERT_TRUE(World().Gather(input, all.ref(), root).ok());
  if (Rank() == root) {
    for (int r = 0; r < Size(); ++r) {
      for (int64_t i = 0; i < n; ++i)
        ASSERT_SAME(all.Get(r * n + i),
                    static_cast<float>(Value(dt, ReduceOp::kSum, r, i)))
            << "gather n=" << n << " root " << root << " part " << r;
    }
  }
  Buffer mine(dt, n);
  TensorRef output = Rank() == root ? TensorRef(inside, n, dt) : mine.ref();
  ASSERT_TRUE(World().Scatter(all.ref(), output, root).ok());
  Buffer& got = Rank() == root ? all : mine;
  const int64_t from = Rank() == root ? at : 0;
  for (int64_t i = 0; i < n; ++i)
    ASSERT_SAME(got.Get(from + i),
                static_cast<float>(Value(dt, ReduceOp::kSum, Rank(), i)))
        << "scatter n=" << n << " root " << root;
}

// The root's own part in place: its gather input inside the output, its
// scatter output inside the input.
TEST(Collectives, GatherScatterInPlaceAtTheRoot) {
  const DataType dt = DataType::kFloat32;
  for (int64_t n : Counts()) {
    for (int root = 0; root < Size(); ++root) {
      Buffer in(dt, n), all(dt, n * Size());
      for (int64_t i = 0; i < n; ++i) {
        in.Set(i, Value(dt, ReduceOp::kSum, Rank(), i));
        all.Set(root * n + i, Value(dt, ReduceOp::kSum, root, i));
      }
      ASSERT_NO_FATAL_FAILURE(
          GatherThenScatterAtTheRoot(in, all, n, root, /*at=*/root * n));
    }
  }
}

// The root's input inside its output (gather), or its output inside its
// input (scatter), across two parts at an offset that is no part's start:
// the contract stages them, so every backend sees only the in-place form.
TEST(Collectives, GatherScatterAcrossPartsAtTheRoot) {
  if (Size() == 1) GTEST_SKIP() << "one part: every overlap is in place";
  const DataType dt = DataType::kFloat32;
  for (int64_t n : Counts()) {
    for (int root = 0; root < Size(); ++root) {
      // n / 2 elements into part 0 (part 1's start for n == 1 at root 0).
      const int64_t at = n / 2 + (root == 0 && n / 2 == 0 ? n : 0);
      Buffer in(dt, n), all(dt, n * Size());
      for (int64_t i = 0; i < n; ++i) {
        in.Set(i, Value(dt, ReduceOp::kSum, Rank(), i));
        all.Set(at + i, Value(dt, ReduceOp::kSum, Rank(), i));
      }
      ASSERT_NO_FATAL_FAILURE(GatherThenScatterAtTheRoot(in, all, n, root, at));
    }
  }
}

TEST(Collectives, ReduceScatter) {
  for (DataType dt :
       {DataType::kFloat32, DataType::kInt32, DataType::kFloat16}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMean}) {
      for (int64_t n : Counts()) {
        Buffer in(dt, n * Size()), out(dt, n);
        in.FillPeriodic([&](int64_t i) { return Value(dt, op, Rank(), i); });
        ASSERT_TRUE(World().ReduceScatter(in.ref(), out.ref(), op).ok());
        Buffer want(dt, n);
        want.FillPeriodic([&](int64_t i) {
          return Expected(dt, op, Rank() * n + i, Size());
        });
        if (!out.SameBytes(0, want, 0, n)) {
          for (int64_t i = 0; i < n; ++i) {
            EXPECT_CLOSE(out.Get(i), Expected(dt, op, Rank() * n + i, Size()),
                         dt, absl::StrCat("reduce_scatter i=", i));
          }
        }
        // The input is left as it was.
        Buffer original(dt, n * Size());
        original.FillPeriodic(
            [&](int64_t i) { return Value(dt, op, Rank(), i); });
        if (in.SameBytes(0, original, 0, n * Size())) continue;
        for (int64_t i = 0; i < n * Size(); ++i)
          ASSERT_SAME(in.Get(i), original.Get(i));
      }
    }
  }
}

// The elements an all_to_all's splits add up to.
int64_t Total(const std::vector<int64_t>& splits) {
  return std::accumulate(splits.begin(), splits.end(), int64_t{0});
}

// An all_to_all of float32 values with uneven splits: `in` holds
// in_splits[d] values for each rank d in turn, `out` takes out_splits[s]
// from each rank s.
absl::Status UnevenAllToAll(std::vector<float>& in, std::vector<float>& out,
                            const std::vector<int64_t>& in_splits,
                            const std::vector<int64_t>& out_splits) {
  return World().AllToAll(TensorRef(in.data(), in.size(), DataType::kFloat32),
                          TensorRef(out.data(), out.size(), DataType::kFloat32),
                          in_splits, out_splits);
}

TEST(Collectives, AllToAllEqualAndUneven) {
  const int n = Size();
  // Equal: element j of chunk d from rank r is 1000000*r + 1000*d + j (a
  // small chunk, and one of many shared-memory rounds).
  for (const int64_t chunk : {int64_t{3}, int64_t{300007}}) {
    std::vector<int64_t> in(chunk * n), out(chunk * n);
    for (int d = 0; d < n; ++d) {
      for (int64_t j = 0; j < chunk; ++j)
        in[d * chunk + j] = 1000000 * Rank() + 1000 * d + j;
    }
    ASSERT_TRUE(
        World()
            .AllToAll(TensorRef(in.data(), in.size(), DataType::kInt64),
                      TensorRef(out.data(), out.size(), DataType::kInt64))
            .ok());
    for (int s = 0; s < n; ++s) {
      for (int64_t j = 0; j < chunk; ++j) {
        ASSERT_EQ(out[s * chunk + j], 1000000 * s + 1000 * Rank() + j)
            << "chunk " << chunk << " from rank " << s << " j=" << j;
      }
    }
  }
  // Equal, in place (the output is the input, which the peers read): a
  // small chunk, one between a slot's and single copy's threshold, and a
  // large one.
  for (const int64_t chunk : {int64_t{3}, int64_t{2053}, int64_t{300007}}) {
    std::vector<int64_t> buf(chunk * n);
    for (int d = 0; d < n; ++d) {
      for (int64_t j = 0; j < chunk; ++j)
        buf[d * chunk + j] = 1000000 * Rank() + 1000 * d + j;
    }
    const TensorRef t(buf.data(), buf.size(), DataType::kInt64);
    ASSERT_TRUE(World().AllToAll(t, t).ok());
    for (int s = 0; s < n; ++s) {
      for (int64_t j = 0; j < chunk; ++j) {
        ASSERT_EQ(buf[s * chunk + j], 1000000 * s + 1000 * Rank() + j)
            << "in place, chunk " << chunk << " from rank " << s << " j=" << j;
      }
    }
  }
  // Uneven: rank r sends r + d + 1 elements to rank d.
  std::vector<int64_t> in_splits(n), out_splits(n);
  for (int d = 0; d < n; ++d) in_splits[d] = Rank() + d + 1;
  for (int s = 0; s < n; ++s) out_splits[s] = s + Rank() + 1;
  std::vector<float> uin(Total(in_splits)), uout(Total(out_splits));
  for (int d = 0, k = 0; d < n; ++d) {
    for (int j = 0; j < in_splits[d]; ++j)
      uin[k++] = 100.0f * Rank() + d + 0.5f * j;
  }
  ASSERT_TRUE(UnevenAllToAll(uin, uout, in_splits, out_splits).ok());
  for (int s = 0, k = 0; s < n; ++s) {
    for (int j = 0; j < out_splits[s]; ++j)
      EXPECT_EQ(uout[k++], 100.0f * s + Rank() + 0.5f * j);
  }
  // Large and uneven: pieces of up to (2 * size - 1) * 100003 floats, many
  // shared-memory rounds, each pair's last round partial and different.
  {
    const int64_t k = 100003;
    std::vector<int64_t> big_in(n), big_out(n);
    for (int d = 0; d < n; ++d) big_in[d] = (Rank() + d + 1) * k;
    for (int s = 0; s < n; ++s) big_out[s] = (s + Rank() + 1) * k;
    std::vector<float> bin(Total(big_in)), bout(Total(big_out), -1.0f);
    for (int d = 0, at = 0; d < n; ++d) {
      for (int64_t j = 0; j < big_in[d]; ++j)
        bin[at++] = static_cast<float>(1000000 * Rank() + 1000 * d + j % 997);
    }
    ASSERT_TRUE(UnevenAllToAll(bin, bout, big_in, big_out).ok());
    for (int s = 0, at = 0; s < n; ++s) {
      for (int64_t j = 0; j < big_out[s]; ++j) {
        ASSERT_EQ(bout[at++],
                  static_cast<float>(1000000 * s + 1000 * Rank() + j % 997))
            << "from rank " << s << " j=" << j;
      }
    }
  }
  // Splits that do not match across ranks fail on every rank (size > 1).
  if (n > 1) {
    std::vector<int64_t> bad_in = in_splits;
    if (Rank() == 0) {
      bad_in[0] += 1;
      bad_in[1] -= 1;
    }
    absl::Status st = UnevenAllToAll(uin, uout, bad_in, out_splits);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_NE(st.message().find("rank 0 sends"), absl::string_view::npos) << st;
  }
}

TEST(Collectives, BarrierSendRecvAndAsync) {
  ASSERT_TRUE(World().Barrier().ok());
  const int n = Size();
  if (n > 1) {
    // A ring: send to the right, receive from the left.
    std::vector<int32_t> mine(100, Rank()), from_left(100, -1);
    const int right = (Rank() + 1) % n, left = (Rank() + n - 1) % n;
    auto send = World().SendAsync(TensorRef(mine.data(), 100, DataType::kInt32),
                                  right, 7);
    ASSERT_TRUE(
        World()
            .Recv(TensorRef(from_left.data(), 100, DataType::kInt32), left, 7)
            .ok());
    ASSERT_TRUE(send->Wait(absl::Seconds(30)).ok());
    EXPECT_EQ(from_left, std::vector<int32_t>(100, left));
    // A receive whose size does not match what was sent is an error naming
    // both.
    std::vector<int32_t> wrong(50);
    auto send2 = World().SendAsync(
        TensorRef(mine.data(), 100, DataType::kInt32), right, 8);
    absl::Status st =
        World().Recv(TensorRef(wrong.data(), 50, DataType::kInt32), left, 8);
    ASSERT_TRUE(send2->Wait(absl::Seconds(30)).ok());
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_NE(st.message().find("sent int32 x100"), absl::string_view::npos)
        << st;
  }
  // Several async operations in flight, completed in order.
  std::vector<std::vector<double>> bufs(4, std::vector<double>(5000));
  std::vector<std::shared_ptr<Work>> works;
  for (int k = 0; k < 4; ++k) {
    for (size_t i = 0; i < bufs[k].size(); ++i) bufs[k][i] = k + Rank() + i;
    works.push_back(World().AllReduceAsync(
        TensorRef(bufs[k].data(), 5000, DataType::kFloat64), ReduceOp::kSum));
  }
  for (int k = 0; k < 4; ++k) {
    ASSERT_TRUE(works[k]->Wait(absl::Seconds(60)).ok()) << works[k]->status();
    for (size_t i = 0; i < 5000; i += 499) {
      EXPECT_EQ(bufs[k][i],
                n * (k + static_cast<double>(i)) + n * (n - 1) / 2.0);
    }
  }
}

// This process's threads (/proc/self/task).
int Threads() {
  int n = 0;
  DIR* dir = opendir("/proc/self/task");
  while (dirent* e = readdir(dir)) n += e->d_name[0] != '.';
  closedir(dir);
  return n;
}

// Sends and receives are matched by peer and tag, as torch's and MPI's
// isend / irecv are: sends of tags 8 then 7 complete against receives of 7
// then 8 (one lane per peer and direction would wait for each other's
// heads). And a program that uses a new tag every step keeps a bounded
// number of lanes, each with its thread.
TEST(Collectives, SendsAndReceivesAreMatchedByTagInAnyOrder) {
  const int n = Size();
  if (n == 1) GTEST_SKIP() << "needs two ranks";
  const int right = (Rank() + 1) % n, left = (Rank() + n - 1) % n;
  std::vector<int32_t> eight(64, 800 + Rank()), seven(64, 700 + Rank());
  std::vector<int32_t> got7(64, -1), got8(64, -1);
  std::vector<std::shared_ptr<Work>> works = {
      World().SendAsync(TensorRef(eight.data(), 64, DataType::kInt32), right,
                        8),
      World().SendAsync(TensorRef(seven.data(), 64, DataType::kInt32), right,
                        7),
      World().RecvAsync(TensorRef(got7.data(), 64, DataType::kInt32), left, 7),
      World().RecvAsync(TensorRef(got8.data(), 64, DataType::kInt32), left, 8),
  };
  for (auto& w : works) {
    ASSERT_TRUE(w->Wait(absl::Seconds(20)).ok()) << w->status();
  }
  EXPECT_EQ(got7, std::vector<int32_t>(64, 700 + left));
  EXPECT_EQ(got8, std::vector<int32_t>(64, 800 + left));

  const int before = Threads();
  for (int step = 0; step < 12 * n + 40; ++step) {
    std::vector<int32_t> out(4, step * 10 + Rank()), in(4, -1);
    auto send = World().SendAsync(TensorRef(out.data(), 4, DataType::kInt32),
                                  right, 1000 + step);
    ASSERT_TRUE(
        World()
            .Recv(TensorRef(in.data(), 4, DataType::kInt32), left, 1000 + step)
            .ok());
    ASSERT_TRUE(send->Wait(absl::Seconds(20)).ok()) << send->status();
    ASSERT_EQ(in, std::vector<int32_t>(4, step * 10 + left));
  }
  EXPECT_LE(Threads() - before, 4 * n + 10)
      << "lanes (and their threads) accumulate with the tags used";
}

TEST(Collectives, MismatchedCallsFailOnEveryRankAndLeaveTheGroupUsable) {
  if (Size() == 1) GTEST_SKIP() << "needs two ranks";
  // Different element counts.
  std::vector<float> v(4 + Rank(), 1.0f);
  absl::Status st = World().AllReduce(
      TensorRef(v.data(), v.size(), DataType::kFloat32), ReduceOp::kSum);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("ranks disagree on all_reduce #"),
            absl::string_view::npos)
      << st;
  EXPECT_NE(st.message().find("rank(s) 1 called all_reduce"),
            absl::string_view::npos)
      << st;
  for (float x : v) EXPECT_EQ(x, 1.0f);  // nothing moved
  // Large buffers of different sizes (would take Gloo's own path).
  std::vector<float> big(100000 + 1000 * Rank(), 2.0f);
  st = World().AllReduce(TensorRef(big.data(), big.size(), DataType::kFloat32),
                         ReduceOp::kSum);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  // Different operations.
  std::vector<float> w(4, 1.0f);
  st = Rank() == 0
           ? World().Broadcast(TensorRef(w.data(), 4, DataType::kFloat32), 0)
           : World().AllReduce(TensorRef(w.data(), 4, DataType::kFloat32),
                               ReduceOp::kSum);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("called broadcast"), absl::string_view::npos)
      << st;
  // The group still works.
  std::vector<float> ok(4, 1.0f);
  ASSERT_TRUE(World()
                  .AllReduce(TensorRef(ok.data(), 4, DataType::kFloat32),
                             ReduceOp::kSum)
                  .ok());
  EXPECT_EQ(ok[0], Size());
  EXPECT_TRUE(World().AsyncError().ok());
}

TEST(Collectives, Subgroups) {
  const int n = Size();
  // Even ranks.
  std::vector<int> evens;
  for (int r = 0; r < n; r += 2) evens.push_back(r);
  auto even = World().NewGroup(evens);
  ASSERT_TRUE(even.ok()) << even.status();
  // The first and last rank ({0, 3} at size 4), listed last-first.
  auto ends = World().NewGroup(n > 1 ? std::vector<int>{n - 1, 0}
                                     : std::vector<int>{0});
  ASSERT_TRUE(ends.ok()) << ends.status();

  int64_t x = 10 + Rank();
  absl::Status st =
      (*even)->AllReduce(TensorRef(&x, 1, DataType::kInt64), ReduceOp::kSum);
  if (Rank() % 2 == 0) {
    ASSERT_TRUE(st.ok()) << st;
    int64_t want = 0;
    for (int r : evens) want += 10 + r;
    EXPECT_EQ(x, want);
    EXPECT_EQ((*even)->rank(), Rank() / 2);
    EXPECT_EQ((*even)->size(), static_cast<int>(evens.size()));
  } else {
    EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
    EXPECT_NE(st.message().find("is not a member of group 'world/1'"),
              absl::string_view::npos)
        << st;
    EXPECT_FALSE((*even)->is_member());
    EXPECT_EQ((*even)->rank(), -1);
  }
  if ((*ends)->is_member()) {
    // Group rank 0 is world rank n-1.
    std::vector<float> b(3000, static_cast<float>(Rank()));
    ASSERT_TRUE(
        (*ends)
            ->Broadcast(TensorRef(b.data(), b.size(), DataType::kFloat32), 0)
            .ok());
    EXPECT_EQ(b[2999], static_cast<float>(n - 1));
    // A group nested inside it.
    auto nested = (*ends)->NewGroup({0});
    ASSERT_TRUE(nested.ok()) << nested.status();
    if ((*nested)->is_member()) {
      EXPECT_EQ((*nested)->global_ranks(), std::vector<int>{n - 1});
      ASSERT_TRUE((*nested)->Barrier().ok());
    }
  }
  // World traffic keeps working after subgroup traffic.
  int64_t y = 1;
  ASSERT_TRUE(World()
                  .AllReduce(TensorRef(&y, 1, DataType::kInt64), ReduceOp::kSum)
                  .ok());
  EXPECT_EQ(y, n);
  EXPECT_EQ(World().NewGroup({n}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace distkit
