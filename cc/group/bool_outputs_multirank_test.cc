// Bool outputs are 0 or 1 (CollectiveContract): each rank of a real job
// (dk_multirank_test, world sizes 1-4) contributes kBool tensors over raw
// byte storage holding bytes a C caller may pass (0, 1, 2, 255, ...), and
// every operation's output byte must be exactly (what it carries != 0).
// Each rank computes what it expects from RawBool for every rank, so nothing
// is taken from the library under test.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "testing/cc/multirank_gtest.h"

namespace distkit {
namespace {

using testing::Rank;
using testing::Size;
using testing::World;

using Bytes = std::vector<uint8_t>;

// Rank r's byte at index i: non-zero bytes other than 1 among 0s and 1s, so
// every fold (or, and, xor) takes both values across the indices.
uint8_t RawBool(int r, int64_t i) {
  static constexpr uint8_t kBytes[] = {2, 0, 255, 1, 0, 128, 3, 0, 1, 254, 0};
  constexpr int64_t kCount = sizeof(kBytes);
  return kBytes[(r * 4 + i * 3 + i / kCount) % kCount];
}
bool Truth(int r, int64_t i) { return RawBool(r, i) != 0; }

Bytes RawInput(int r, int64_t n) {
  Bytes b(n);
  for (int64_t i = 0; i < n; ++i) b[i] = RawBool(r, i);
  return b;
}

TensorRef Bools(Bytes& b) {
  return TensorRef(b.data(), static_cast<int64_t>(b.size()), DataType::kBool);
}
TensorRef Bools(Bytes& b, int64_t offset, int64_t count) {
  return TensorRef(b.data() + offset, count, DataType::kBool);
}

// The first index whose byte is not exactly want(i) (0 or 1), as a message;
// empty when every byte is.
template <typename Want>
std::string FirstWrong(const Bytes& got, int64_t at, int64_t count, Want want) {
  for (int64_t i = 0; i < count; ++i) {
    const int expected = want(i) ? 1 : 0;
    if (got[at + i] != expected) {
      return absl::StrCat("byte ", at + i, " is ",
                          static_cast<int>(got[at + i]), ", expected ",
                          expected);
    }
  }
  return "";
}

// The fold each reduction is on bool: or (sum, max, mean, bor), and
// (product, min, band), xor (bxor).
bool Fold(ReduceOp op, int64_t i, int64_t offset = 0) {
  bool acc = Truth(0, offset + i);
  for (int r = 1; r < Size(); ++r) {
    const bool x = Truth(r, offset + i);
    switch (op) {
      case ReduceOp::kProduct:
      case ReduceOp::kMin:
      case ReduceOp::kBand:
        acc = acc && x;
        break;
      case ReduceOp::kBxor:
        acc = acc != x;
        break;
      default:
        acc = acc || x;
    }
  }
  return acc;
}

constexpr ReduceOp kOps[] = {
    ReduceOp::kSum,  ReduceOp::kProduct, ReduceOp::kMin,  ReduceOp::kMax,
    ReduceOp::kBand, ReduceOp::kBor,     ReduceOp::kBxor, ReduceOp::kMean};

// Elements per rank's part: one carried with the signatures, and one past
// every inline and chunk threshold (the transports' own paths).
class BoolOutputs : public ::testing::TestWithParam<int64_t> {
 protected:
  int64_t Part() const { return GetParam(); }
};

TEST_P(BoolOutputs, AllReduce) {
  for (ReduceOp op : kOps) {
    SCOPED_TRACE(ReduceOpName(op));
    Bytes data = RawInput(Rank(), Part());
    ASSERT_TRUE(World().AllReduce(Bools(data), op).ok());
    EXPECT_EQ(
        FirstWrong(data, 0, Part(), [&](int64_t i) { return Fold(op, i); }),
        "");
  }
}

TEST_P(BoolOutputs, Broadcast) {
  for (int root = 0; root < Size(); ++root) {
    SCOPED_TRACE(absl::StrCat("root ", root));
    Bytes data = Rank() == root ? RawInput(root, Part()) : Bytes(Part(), 7);
    ASSERT_TRUE(World().Broadcast(Bools(data), root).ok());
    EXPECT_EQ(
        FirstWrong(data, 0, Part(), [&](int64_t i) { return Truth(root, i); }),
        "");
  }
}

TEST_P(BoolOutputs, Reduce) {
  for (ReduceOp op : kOps) {
    for (int root = 0; root < Size(); ++root) {
      SCOPED_TRACE(absl::StrCat(ReduceOpName(op), " root ", root));
      Bytes data = RawInput(Rank(), Part());
      ASSERT_TRUE(World().Reduce(Bools(data), op, root).ok());
      if (Rank() != root) continue;  // a non-root's data is not a result
      EXPECT_EQ(
          FirstWrong(data, 0, Part(), [&](int64_t i) { return Fold(op, i); }),
          "");
    }
  }
}

TEST_P(BoolOutputs, AllGather) {
  const int64_t m = Part();
  Bytes input = RawInput(Rank(), m), output(m * Size(), 7);
  ASSERT_TRUE(World().AllGather(Bools(input), Bools(output)).ok());
  for (int r = 0; r < Size(); ++r) {
    EXPECT_EQ(
        FirstWrong(output, r * m, m, [&](int64_t i) { return Truth(r, i); }),
        "")
        << "from rank " << r;
  }
  // In place: the input is this rank's own part of the output.
  Bytes inplace(m * Size(), 7);
  const Bytes mine = RawInput(Rank(), m);
  std::copy(mine.begin(), mine.end(), inplace.begin() + Rank() * m);
  ASSERT_TRUE(
      World().AllGather(Bools(inplace, Rank() * m, m), Bools(inplace)).ok());
  for (int r = 0; r < Size(); ++r) {
    EXPECT_EQ(
        FirstWrong(inplace, r * m, m, [&](int64_t i) { return Truth(r, i); }),
        "")
        << "in place, from rank " << r;
  }
  // One output per rank (staged in one buffer, then copied out).
  std::vector<Bytes> parts(Size(), Bytes(m, 7));
  std::vector<TensorRef> refs;
  for (Bytes& p : parts) refs.push_back(Bools(p));
  ASSERT_TRUE(World().AllGather(Bools(input), refs).ok());
  for (int r = 0; r < Size(); ++r) {
    EXPECT_EQ(
        FirstWrong(parts[r], 0, m, [&](int64_t i) { return Truth(r, i); }), "")
        << "from rank " << r;
  }
}

TEST_P(BoolOutputs, Gather) {
  const int64_t m = Part();
  for (int root = 0; root < Size(); ++root) {
    SCOPED_TRACE(absl::StrCat("root ", root));
    Bytes input = RawInput(Rank(), m);
    Bytes output(Rank() == root ? m * Size() : 0, 7);
    ASSERT_TRUE(World().Gather(Bools(input), Bools(output), root).ok());
    if (Rank() != root) continue;
    for (int r = 0; r < Size(); ++r) {
      EXPECT_EQ(
          FirstWrong(output, r * m, m, [&](int64_t i) { return Truth(r, i); }),
          "")
          << "from rank " << r;
    }
  }
}

TEST_P(BoolOutputs, Scatter) {
  const int64_t m = Part();
  for (int root = 0; root < Size(); ++root) {
    SCOPED_TRACE(absl::StrCat("root ", root));
    Bytes input = Rank() == root ? RawInput(root, m * Size()) : Bytes();
    Bytes output(m, 7);
    ASSERT_TRUE(World().Scatter(Bools(input), Bools(output), root).ok());
    EXPECT_EQ(
        FirstWrong(output, 0, m,
                   [&](int64_t i) { return Truth(root, Rank() * m + i); }),
        "");
  }
}

TEST_P(BoolOutputs, ReduceScatter) {
  const int64_t m = Part();
  for (ReduceOp op : kOps) {
    SCOPED_TRACE(ReduceOpName(op));
    Bytes input = RawInput(Rank(), m * Size()), output(m, 7);
    ASSERT_TRUE(World().ReduceScatter(Bools(input), Bools(output), op).ok());
    EXPECT_EQ(FirstWrong(output, 0, m,
                         [&](int64_t i) { return Fold(op, i, Rank() * m); }),
              "");
  }
}

TEST_P(BoolOutputs, AllToAllEqual) {
  const int64_t m = Part();
  // Every rank s's part for this rank, at s's place; `how` names the form.
  auto expect_parts = [&](const Bytes& got, const std::string& how) {
    for (int s = 0; s < Size(); ++s) {
      EXPECT_EQ(FirstWrong(got, s * m, m,
                           [&](int64_t i) { return Truth(s, Rank() * m + i); }),
                "")
          << how << "from rank " << s;
    }
  };
  Bytes input = RawInput(Rank(), m * Size()), output(m * Size(), 7);
  ASSERT_TRUE(World().AllToAll(Bools(input), Bools(output)).ok());
  expect_parts(output, "");
  // In place (exchanged into a staged buffer, then copied over).
  Bytes inplace = RawInput(Rank(), m * Size());
  ASSERT_TRUE(World().AllToAll(Bools(inplace), Bools(inplace)).ok());
  expect_parts(inplace, "in place, ");
}

TEST_P(BoolOutputs, AllToAllUneven) {
  const int n = Size();
  // Rank s sends Count(s, d) elements to rank d.
  auto count = [&](int s, int d) -> int64_t {
    return Part() + (s + 2 * d) % 3;
  };
  // Where rank s's part for rank d starts in s's input.
  auto offset = [&](int s, int d) {
    int64_t at = 0;
    for (int q = 0; q < d; ++q) at += count(s, q);
    return at;
  };
  std::vector<int64_t> in_splits, out_splits;
  for (int q = 0; q < n; ++q) {
    in_splits.push_back(count(Rank(), q));
    out_splits.push_back(count(q, Rank()));
  }
  Bytes input = RawInput(Rank(), offset(Rank(), n));
  int64_t out_total = 0;
  for (int64_t c : out_splits) out_total += c;
  Bytes output(out_total, 7);
  ASSERT_TRUE(World()
                  .AllToAll(Bools(input), Bools(output), in_splits, out_splits)
                  .ok());
  int64_t at = 0;
  for (int s = 0; s < n; ++s) {
    const int64_t from = offset(s, Rank());
    EXPECT_EQ(FirstWrong(output, at, count(s, Rank()),
                         [&](int64_t i) { return Truth(s, from + i); }),
              "")
        << "from rank " << s;
    at += count(s, Rank());
  }
}

TEST_P(BoolOutputs, SendRecv) {
  const int n = Size();
  if (n == 1) GTEST_SKIP() << "needs two ranks";
  const int right = (Rank() + 1) % n, left = (Rank() + n - 1) % n;
  Bytes out = RawInput(Rank(), Part()), in(Part(), 7);
  std::shared_ptr<Work> send = World().SendAsync(Bools(out), right, 3);
  ASSERT_TRUE(World().Recv(Bools(in), left, 3).ok());
  ASSERT_TRUE(send->Wait(absl::Seconds(60)).ok()) << send->status();
  EXPECT_EQ(
      FirstWrong(in, 0, Part(), [&](int64_t i) { return Truth(left, i); }), "");
  EXPECT_TRUE(out == RawInput(Rank(), Part())) << "a send's input changed";
}

INSTANTIATE_TEST_SUITE_P(Parts, BoolOutputs,
                         ::testing::Values(int64_t{5}, int64_t{300007}));

}  // namespace
}  // namespace distkit
