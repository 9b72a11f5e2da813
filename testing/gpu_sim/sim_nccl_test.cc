// dkgpusim's NCCL computes what NCCL computes: every collective, data type
// and reduction across 2, 3 and 4 processes, grouped send/recv, split,
// PreMulSum, operations larger than its staging buffers, and non-blocking
// communicators.

#include <cmath>
#include <map>

#include "gtest/gtest.h"
#include "testing/gpu_sim/sim_test_util.h"

namespace dksim_test {
namespace {

// ---- Element formats, written independently of the simulator's -----------

bool IsInt(int t) {
  return t == ncclInt8 || t == ncclUint8 || t == ncclInt32 || t == ncclUint32 ||
         t == ncclInt64 || t == ncclUint64;
}

// value = (-1)^s * 2^(e - bias) * 1.m, or subnormal.
double DecodeBits(uint32_t v, int ebits, int mbits, int bias) {
  const uint32_t e = (v >> mbits) & ((1u << ebits) - 1);
  const uint32_t m = v & ((1u << mbits) - 1);
  const double sign = (v >> (ebits + mbits)) & 1 ? -1 : 1;
  if (e == 0) return sign * std::ldexp(m, 1 - bias - mbits);
  return sign * std::ldexp(1.0 + m / double(1u << mbits), int(e) - bias);
}

double Decode(int t, uint32_t bits) {
  switch (t) {
    case ncclFloat16:
      return DecodeBits(bits, 5, 10, 15);
    case ncclBfloat16:
      return DecodeBits(bits, 8, 7, 127);
    case ncclFloat8e4m3:
      return DecodeBits(bits, 4, 3, 7);
    default:
      return DecodeBits(bits, 5, 2, 15);
  }
}

// The 16- and 8-bit floats, stored as their codes.
bool IsCoded(int t) {
  return t == ncclFloat16 || t == ncclBfloat16 || t == ncclFloat8e4m3 ||
         t == ncclFloat8e5m2;
}

// Calls f with a zero of the type an element of t is stored as, so that
// loads and stores share one switch.
template <typename F>
auto WithStorageType(int t, F f) {
  switch (t) {
    case ncclInt8:
      return f(int8_t());
    case ncclUint8:
      return f(uint8_t());
    case ncclInt32:
      return f(int32_t());
    case ncclUint32:
      return f(uint32_t());
    case ncclInt64:
      return f(int64_t());
    case ncclUint64:
      return f(uint64_t());
    case ncclFloat32:
      return f(float());
    case ncclFloat64:
      return f(double());
    case ncclFloat16:
    case ncclBfloat16:
      return f(uint16_t());
    default:
      return f(uint8_t());
  }
}

size_t Size(int t) {
  return WithStorageType(t, [](auto x) { return sizeof(x); });
}

// The code of an exactly representable value (found by search: the test
// must not share the simulator's rounding code).
uint32_t EncodeExact(int t, double v) {
  static std::map<std::pair<int, double>, uint32_t> memo;
  auto key = std::make_pair(t, v);
  auto it = memo.find(key);
  if (it != memo.end()) return it->second;
  const uint32_t codes = Size(t) == 1 ? 256 : 65536;
  for (uint32_t c = 0; c < codes; ++c) {
    if (Decode(t, c) == v) return memo[key] = c;
  }
  std::fprintf(stderr, "%g is not exact in type %d\n", v, t);
  std::abort();
}

void Store(int t, char* p, size_t i, double v) {
  WithStorageType(t, [&](auto zero) {
    using T = decltype(zero);
    const T x = IsCoded(t) ? T(EncodeExact(t, v)) : T(v);
    std::memcpy(p + i * sizeof(x), &x, sizeof(x));
  });
}

double LoadValue(int t, const char* p, size_t i) {
  return WithStorageType(t, [&](auto x) {
    std::memcpy(&x, p + i * sizeof(x), sizeof(x));
    return IsCoded(t) ? Decode(t, uint32_t(x)) : double(x);
  });
}

// An integer result wrapped to the type's width, as the device computes.
double Wrap(int t, int64_t v) {
  switch (t) {
    case ncclInt8:
      return int8_t(uint8_t(v));
    case ncclUint8:
      return uint8_t(v);
    case ncclInt32:
      return int32_t(uint32_t(v));
    case ncclUint32:
      return uint32_t(v);
    default:
      return double(v);
  }
}

double Tolerance(int t) {
  switch (t) {
    case ncclFloat16:
      return 1e-3;
    case ncclBfloat16:
      return 8e-3;
    case ncclFloat8e4m3:
      return 0.07;
    case ncclFloat8e5m2:
      return 0.13;
    case ncclFloat32:
      return 1e-6;
    case ncclFloat64:
      return 1e-12;
    default:
      return 0;
  }
}

// Rank r's input element i in case c: exact in every type (multiples of
// 1/4 from 0.5 to 1.5 for floats, 1..5 for integers), different per rank,
// element and case.
double Input(int t, int r, size_t i, int c) {
  const int k = static_cast<int>((2 * r + i + c) % 5);
  return IsInt(t) ? 1 + k : 0.5 + 0.25 * k;
}

double Reduce(int t, int op, const std::vector<double>& xs) {
  if (IsInt(t)) {
    int64_t acc = int64_t(xs[0]);
    for (size_t q = 1; q < xs.size(); ++q) {
      const int64_t v = int64_t(xs[q]);
      switch (op) {
        case ncclSum:
        case ncclAvg:
          acc += v;
          break;
        case ncclProd:
          acc = int64_t(uint64_t(acc) * uint64_t(v));
          break;
        case ncclMax:
          acc = std::max(acc, v);
          break;
        case ncclMin:
          acc = std::min(acc, v);
          break;
      }
    }
    double w = Wrap(t, acc);
    if (op == ncclAvg) w = std::trunc(w / double(xs.size()));
    return w;
  }
  double acc = xs[0];
  for (size_t q = 1; q < xs.size(); ++q) {
    switch (op) {
      case ncclSum:
      case ncclAvg:
        acc += xs[q];
        break;
      case ncclProd:
        acc *= xs[q];
        break;
      case ncclMax:
        acc = std::max(acc, xs[q]);
        break;
      case ncclMin:
        acc = std::min(acc, xs[q]);
        break;
    }
  }
  return op == ncclAvg ? acc / double(xs.size()) : acc;
}

bool Near(int t, double got, double want) {
  if (IsInt(t)) return got == want;
  return std::fabs(got - want) <= Tolerance(t) * std::max(1.0, std::fabs(want));
}

enum Kind { kAllReduce, kReduce, kReduceScatter, kBroadcast, kAllGather };
const char* kKindNames[] = {"AllReduce", "Reduce", "ReduceScatter", "Broadcast",
                            "AllGather"};

struct Case {
  Kind kind;
  int dtype, op, root;
  bool in_place;
  char* send = nullptr;
  char* recv = nullptr;
  size_t send_elems = 0, recv_elems = 0;
};

constexpr size_t kCount = 5;

// Every collective x type x reduction (plus in-place forms) on one stream,
// checked against values computed here. Returns the number of wrong
// elements (or 100 on an API failure).
int CollectiveMatrix(int rank, int n, Board* board) {
  const Api& api = Load();
  ncclComm_t comm;
  SIM_CHECK(InitComm(api, board, rank, n, &comm));
  int got_n = 0, got_rank = -1, got_dev = -1;
  SIM_NCCL(api.ncclCommCount(comm, &got_n));
  SIM_NCCL(api.ncclCommUserRank(comm, &got_rank));
  SIM_NCCL(api.ncclCommCuDevice(comm, &got_dev));
  SIM_CHECK(got_n == n && got_rank == rank && got_dev == rank);
  cudaStream_t s;
  SIM_CUDA(api.cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  std::vector<Case> cases;
  for (int t = 0; t < ncclNumTypes; ++t) {
    for (int op = 0; op < ncclNumOps; ++op) {
      cases.push_back({kAllReduce, t, op, 0, false});
      cases.push_back({kReduce, t, op, (t + op) % n, false});
      cases.push_back({kReduceScatter, t, op, 0, false});
    }
    cases.push_back({kBroadcast, t, ncclSum, t % n, false});
    cases.push_back({kAllGather, t, ncclSum, 0, false});
  }
  cases.push_back({kAllReduce, ncclFloat32, ncclSum, 0, true});
  cases.push_back({kAllReduce, ncclInt32, ncclMax, 0, true});
  cases.push_back({kReduce, ncclFloat64, ncclAvg, n - 1, true});
  cases.push_back({kBroadcast, ncclBfloat16, ncclSum, n - 1, true});
  cases.push_back({kAllGather, ncclFloat16, ncclSum, 0, true});
  cases.push_back({kReduceScatter, ncclFloat32, ncclSum, 0, true});

  std::vector<std::vector<char>> inputs(cases.size());
  for (size_t c = 0; c < cases.size(); ++c) {
    Case& k = cases[c];
    const size_t es = Size(k.dtype);
    k.send_elems = k.kind == kReduceScatter ? kCount * n : kCount;
    k.recv_elems = k.kind == kAllGather       ? kCount * n
                   : k.kind == kReduceScatter ? kCount
                                              : kCount;
    inputs[c].resize(k.send_elems * es);
    for (size_t i = 0; i < k.send_elems; ++i) {
      Store(k.dtype, inputs[c].data(), i, Input(k.dtype, rank, i, int(c)));
    }
    if (k.in_place) {
      // NCCL's in-place layouts: the input is this rank's part of the
      // output (all-gather) or the output is this rank's part of the input
      // (reduce-scatter).
      const size_t big = std::max(k.send_elems, k.recv_elems) * es;
      char* buf = nullptr;
      SIM_CUDA(api.cudaMalloc(reinterpret_cast<void**>(&buf), big));
      k.send = k.recv = buf;
      if (k.kind == kAllGather) k.send = buf + rank * kCount * es;
      if (k.kind == kReduceScatter) k.recv = buf + rank * kCount * es;
    } else {
      SIM_CUDA(
          api.cudaMalloc(reinterpret_cast<void**>(&k.send), k.send_elems * es));
      SIM_CUDA(
          api.cudaMalloc(reinterpret_cast<void**>(&k.recv), k.recv_elems * es));
    }
    SIM_CUDA(api.cudaMemcpyAsync(k.send, inputs[c].data(), inputs[c].size(),
                                 cudaMemcpyHostToDevice, s));
  }
  for (const Case& k : cases) {
    const auto t = static_cast<ncclDataType_t>(k.dtype);
    const auto op = static_cast<ncclRedOp_t>(k.op);
    switch (k.kind) {
      case kAllReduce:
        SIM_NCCL(api.ncclAllReduce(k.send, k.recv, kCount, t, op, comm, s));
        break;
      case kReduce:
        SIM_NCCL(
            api.ncclReduce(k.send, k.recv, kCount, t, op, k.root, comm, s));
        break;
      case kReduceScatter:
        SIM_NCCL(api.ncclReduceScatter(k.send, k.recv, kCount, t, op, comm, s));
        break;
      case kBroadcast:
        SIM_NCCL(api.ncclBroadcast(k.send, k.recv, kCount, t, k.root, comm, s));
        break;
      case kAllGather:
        SIM_NCCL(api.ncclAllGather(k.send, k.recv, kCount, t, comm, s));
        break;
    }
  }
  SIM_CUDA(api.cudaStreamSynchronize(s));
  ncclResult_t async = ncclInternalError;
  SIM_NCCL(api.ncclCommGetAsyncError(comm, &async));
  SIM_CHECK(async == ncclSuccess);

  int wrong = 0;
  for (size_t c = 0; c < cases.size(); ++c) {
    const Case& k = cases[c];
    if (k.kind == kReduce && rank != k.root) continue;
    const size_t es = Size(k.dtype);
    std::vector<char> out(k.recv_elems * es);
    SIM_CUDA(
        api.cudaMemcpy(out.data(), k.recv, out.size(), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < k.recv_elems; ++i) {
      double want = 0;
      std::vector<double> xs;
      switch (k.kind) {
        case kAllReduce:
        case kReduce:
          for (int q = 0; q < n; ++q)
            xs.push_back(Input(k.dtype, q, i, int(c)));
          want = Reduce(k.dtype, k.op, xs);
          break;
        case kReduceScatter:
          for (int q = 0; q < n; ++q) {
            xs.push_back(Input(k.dtype, q, rank * kCount + i, int(c)));
          }
          want = Reduce(k.dtype, k.op, xs);
          break;
        case kBroadcast:
          want = Input(k.dtype, k.root, i, int(c));
          break;
        case kAllGather:
          want = Input(k.dtype, int(i / kCount), i % kCount, int(c));
          break;
      }
      const double got = LoadValue(k.dtype, out.data(), i);
      if (!Near(k.dtype, got, want)) {
        if (++wrong <= 10) {
          std::fprintf(stderr,
                       "rank %d: case %zu %s type %d op %d root %d%s: "
                       "element %zu is %g, want %g\n",
                       rank, c, kKindNames[k.kind], k.dtype, k.op, k.root,
                       k.in_place ? " in place" : "", i, got, want);
        }
      }
    }
  }
  SIM_NCCL(api.ncclCommDestroy(comm));
  return wrong == 0 ? 0 : 1;
}

void ExpectAllPass(const std::vector<ChildResult>& results) {
  for (size_t r = 0; r < results.size(); ++r) {
    EXPECT_TRUE(results[r].ExitedWith(0))
        << "rank " << r << ": " << results[r].Describe();
  }
}

void RunMatrix(int n) {
  Board* board = NewBoard();
  ExpectAllPass(RunChildren(
      n, [&](int rank) { return CollectiveMatrix(rank, n, board); },
      {{"DKSIM_DEVICES", std::to_string(n)}, {"DKSIM_MAX_DELAY_US", "20"}}));
  munmap(board, sizeof(Board));
}

TEST(SimNccl, EveryCollectiveTypeAndReductionOnTwoRanks) { RunMatrix(2); }
TEST(SimNccl, EveryCollectiveTypeAndReductionOnThreeRanks) { RunMatrix(3); }
TEST(SimNccl, EveryCollectiveTypeAndReductionOnFourRanks) { RunMatrix(4); }

// 16-bit floats are summed in float and rounded once, to nearest even.
TEST(SimNccl, HalfAndBfloat16RoundToNearestEven) {
  Board* board = NewBoard();
  ExpectAllPass(RunChildren(
      2,
      [&](int rank) {
        const Api& api = Load();
        ncclComm_t comm;
        SIM_CHECK(InitComm(api, board, rank, 2, &comm));
        // Rank 0 holds a, rank 1 half an ulp of 1.0: a tie each time.
        const double half_ulp[2] = {std::ldexp(1, -11), std::ldexp(1, -8)};
        const int types[2] = {ncclFloat16, ncclBfloat16};
        for (int k = 0; k < 2; ++k) {
          const int t = types[k];
          const double ulp = 2 * half_ulp[k];
          std::vector<char> in(4);
          Store(t, in.data(), 0, rank == 0 ? 1.0 : half_ulp[k]);
          Store(t, in.data(), 1, rank == 0 ? 1.0 + ulp : half_ulp[k]);
          char* d = nullptr;
          SIM_CUDA(api.cudaMalloc(reinterpret_cast<void**>(&d), 4));
          SIM_CUDA(api.cudaMemcpy(d, in.data(), 4, cudaMemcpyHostToDevice));
          SIM_CUDA(api.cudaDeviceSynchronize());
          SIM_NCCL(api.ncclAllReduce(d, d, 2, static_cast<ncclDataType_t>(t),
                                     ncclSum, comm, nullptr));
          SIM_CUDA(api.cudaMemcpy(in.data(), d, 4, cudaMemcpyDeviceToHost));
          SIM_CHECK(LoadValue(t, in.data(), 0) == 1.0);            // to even
          SIM_CHECK(LoadValue(t, in.data(), 1) == 1.0 + 2 * ulp);  // to even
        }
        SIM_NCCL(api.ncclCommDestroy(comm));
        return 0;
      },
      {}));
  munmap(board, sizeof(Board));
}

// Grouped send/recv (a ring larger than the simulator's pair buffers, an
// all-to-all of uneven sizes, a send to oneself), split (with a rank that
// opts out), PreMulSum with host and device scalars, and collectives larger
// than a staging slot.
int GroupsSplitsAndBigOps(int rank, int n, Board* board) {
  const Api& api = Load();
  ncclComm_t comm;
  SIM_CHECK(InitComm(api, board, rank, n, &comm));
  cudaStream_t s;
  SIM_CUDA(api.cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  // Ring: 100000 floats to the next rank, from the previous, plus 3 ints to
  // oneself, all in one group.
  const size_t big = 100000;
  std::vector<float> mine(big);
  for (size_t i = 0; i < big; ++i) mine[i] = float(rank * 1000 + i % 1000);
  float *sbuf, *rbuf;
  int *self_in, *self_out;
  SIM_CUDA(api.cudaMalloc(reinterpret_cast<void**>(&sbuf), big * 4));
  SIM_CUDA(api.cudaMalloc(reinterpret_cast<void**>(&rbuf), big * 4));
  SIM_CUDA(api.cudaMalloc(reinterpret_cast<void**>(&self_in), 12));
  SIM_CUDA(api.cudaMalloc(reinterpret_cast<void**>(&self_out), 12));
  const int three[3] = {rank, rank + 10, rank + 20};
  SIM_CUDA(api.cudaMemcpyAsync(sbuf, mine.data(), big * 4,
                               cudaMemcpyHostToDevice, s));
  SIM_CUDA(api.cudaMemcpyAsync(self_in, three, 12, cudaMemcpyHostToDevice, s));
  SIM_NCCL(api.ncclGroupStart());
  SIM_NCCL(api.ncclSend(sbuf, big, ncclFloat32, (rank + 1) % n, comm, s));
  SIM_NCCL(api.ncclRecv(rbuf, big, ncclFloat32, (rank + n - 1) % n, comm, s));
  SIM_NCCL(api.ncclSend(self_in, 3, ncclInt32, rank, comm, s));
  SIM_NCCL(api.ncclRecv(self_out, 3, ncclInt32, rank, comm, s));
  SIM_NCCL(api.ncclGroupEnd());

  // All-to-all: rank r sends (r + q + 1) * 7 int64s to q, valued r*100+q.
  std::vector<int64_t*> a2a_in(n), a2a_out(n);
  for (int q = 0; q < n; ++q) {
    const size_t out_n = (rank + q + 1) * 7;
    std::vector<int64_t> v(out_n, rank * 100 + q);
    SIM_CUDA(api.cudaMalloc(reinterpret_cast<void**>(&a2a_in[q]), out_n * 8));
    SIM_CUDA(api.cudaMalloc(reinterpret_cast<void**>(&a2a_out[q]), out_n * 8));
    SIM_CUDA(api.cudaMemcpyAsync(a2a_in[q], v.data(), out_n * 8,
                                 cudaMemcpyHostToDevice, s));
  }
  SIM_NCCL(api.ncclGroupStart());
  for (int q = 0; q < n; ++q) {
    const size_t cnt = (rank + q + 1) * 7;
    SIM_NCCL(api.ncclSend(a2a_in[q], cnt, ncclInt64, q, comm, s));
    SIM_NCCL(api.ncclRecv(a2a_out[q], cnt, ncclInt64, q, comm, s));
  }
  SIM_NCCL(api.ncclGroupEnd());

  // PreMulSum: sum of (rank + 1) * x, host scalar (float) and device
  // scalar (double, 0.5 * (rank + 1)).
  float* pf;
  double *pd, *dscalar;
  SIM_CUDA(api.cudaMalloc(reinterpret_cast<void**>(&pf), 4 * 4));
  SIM_CUDA(api.cudaMalloc(reinterpret_cast<void**>(&pd), 4 * 8));
  SIM_CUDA(api.cudaMalloc(reinterpret_cast<void**>(&dscalar), 8));
  const float xf[4] = {0.5f, 1.5f, 2.5f, 3.5f};
  const double xd[4] = {1, 2, 3, 4};
  const double ds = 0.5 * (rank + 1);
  SIM_CUDA(api.cudaMemcpyAsync(pf, xf, 16, cudaMemcpyHostToDevice, s));
  SIM_CUDA(api.cudaMemcpyAsync(pd, xd, 32, cudaMemcpyHostToDevice, s));
  SIM_CUDA(api.cudaMemcpyAsync(dscalar, &ds, 8, cudaMemcpyHostToDevice, s));
  float hs = float(rank + 1);
  ncclRedOp_t pre_f, pre_d;
  SIM_NCCL(api.ncclRedOpCreatePreMulSum(&pre_f, &hs, ncclFloat32,
                                        ncclScalarHostImmediate, comm));
  hs = 100;  // captured at creation: this must not matter
  SIM_NCCL(api.ncclRedOpCreatePreMulSum(&pre_d, dscalar, ncclFloat64,
                                        ncclScalarDevice, comm));
  SIM_NCCL(api.ncclAllReduce(pf, pf, 4, ncclFloat32, pre_f, comm, s));
  SIM_NCCL(api.ncclAllReduce(pd, pd, 4, ncclFloat64, pre_d, comm, s));

  // Larger than a staging slot (1 MiB): 300000 floats.
  const size_t huge = 300000;
  std::vector<float> hv(huge);
  for (size_t i = 0; i < huge; ++i) hv[i] = float(rank + i % 7);
  float* hbuf;
  float* bbuf;
  SIM_CUDA(api.cudaMalloc(reinterpret_cast<void**>(&hbuf), huge * 4));
  SIM_CUDA(api.cudaMalloc(reinterpret_cast<void**>(&bbuf), huge * 4));
  SIM_CUDA(api.cudaMemcpyAsync(hbuf, hv.data(), huge * 4,
                               cudaMemcpyHostToDevice, s));
  SIM_CUDA(api.cudaMemcpyAsync(bbuf, hv.data(), huge * 4,
                               cudaMemcpyHostToDevice, s));
  SIM_NCCL(api.ncclAllReduce(hbuf, hbuf, huge, ncclFloat32, ncclSum, comm, s));
  SIM_NCCL(api.ncclBroadcast(bbuf, bbuf, huge, ncclFloat32, n - 1, comm, s));
  SIM_CUDA(api.cudaStreamSynchronize(s));
  SIM_NCCL(api.ncclRedOpDestroy(pre_f, comm));
  SIM_NCCL(api.ncclRedOpDestroy(pre_d, comm));

  std::vector<float> got(big);
  SIM_CUDA(api.cudaMemcpy(got.data(), rbuf, big * 4, cudaMemcpyDeviceToHost));
  const int prev = (rank + n - 1) % n;
  for (size_t i = 0; i < big; ++i) {
    SIM_CHECK(got[i] == float(prev * 1000 + i % 1000));
  }
  int self[3];
  SIM_CUDA(api.cudaMemcpy(self, self_out, 12, cudaMemcpyDeviceToHost));
  SIM_CHECK(self[0] == rank && self[1] == rank + 10 && self[2] == rank + 20);
  for (int q = 0; q < n; ++q) {
    const size_t cnt = (rank + q + 1) * 7;
    std::vector<int64_t> v(cnt);
    SIM_CUDA(
        api.cudaMemcpy(v.data(), a2a_out[q], cnt * 8, cudaMemcpyDeviceToHost));
    for (int64_t x : v) SIM_CHECK(x == q * 100 + rank);
  }
  float rf[4];
  double rd[4];
  SIM_CUDA(api.cudaMemcpy(rf, pf, 16, cudaMemcpyDeviceToHost));
  SIM_CUDA(api.cudaMemcpy(rd, pd, 32, cudaMemcpyDeviceToHost));
  const double weights = n * (n + 1) / 2.0;  // sum of (q + 1)
  for (int i = 0; i < 4; ++i) {
    SIM_CHECK(rf[i] == float(weights * xf[i]));
    SIM_CHECK(rd[i] == 0.5 * weights * xd[i]);
  }
  SIM_CUDA(api.cudaMemcpy(hv.data(), hbuf, huge * 4, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < huge; ++i) {
    SIM_CHECK(hv[i] == float(n * (n - 1) / 2 + n * (i % 7)));
  }
  SIM_CUDA(api.cudaMemcpy(hv.data(), bbuf, huge * 4, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < huge; ++i) SIM_CHECK(hv[i] == float(n - 1 + i % 7));

  // Split: even and odd ranks, ordered by descending rank; with three
  // ranks the last opts out.
  const bool out = n == 3 && rank == 2;
  ncclComm_t sub = nullptr;
  SIM_NCCL(api.ncclCommSplit(comm, out ? NCCL_SPLIT_NOCOLOR : rank % 2, -rank,
                             &sub, nullptr));
  if (out) {
    SIM_CHECK(sub == nullptr);
  } else {
    SIM_CHECK(sub != nullptr);
    std::vector<int> members;
    for (int q = n - 1; q >= 0; --q) {
      if (q % 2 == rank % 2 && !(n == 3 && q == 2)) members.push_back(q);
    }
    int sub_n = 0, sub_rank = -1, sub_dev = -1;
    SIM_NCCL(api.ncclCommCount(sub, &sub_n));
    SIM_NCCL(api.ncclCommUserRank(sub, &sub_rank));
    SIM_NCCL(api.ncclCommCuDevice(sub, &sub_dev));
    SIM_CHECK(sub_n == int(members.size()));
    SIM_CHECK(members[sub_rank] == rank);
    SIM_CHECK(sub_dev == rank);
    int* v;
    SIM_CUDA(api.cudaMalloc(reinterpret_cast<void**>(&v), 4));
    const int one = rank + 1;
    SIM_CUDA(api.cudaMemcpyAsync(v, &one, 4, cudaMemcpyHostToDevice, s));
    SIM_NCCL(api.ncclAllReduce(v, v, 1, ncclInt32, ncclSum, sub, s));
    int sum = 0;
    SIM_CUDA(api.cudaMemcpyAsync(&sum, v, 4, cudaMemcpyDeviceToHost, s));
    int want = 0;
    for (int q : members) want += q + 1;
    SIM_CHECK(sum == want);
    SIM_NCCL(api.ncclCommDestroy(sub));
  }
  SIM_NCCL(api.ncclCommDestroy(comm));
  return 0;
}

TEST(SimNccl, GroupsSplitsPreMulSumAndLargeOperations) {
  for (int n : {3, 4}) {
    Board* board = NewBoard();
    ExpectAllPass(RunChildren(
        n, [&](int rank) { return GroupsSplitsAndBigOps(rank, n, board); },
        {{"DKSIM_DEVICES", "4"}, {"DKSIM_MAX_DELAY_US", "50"}}));
    munmap(board, sizeof(Board));
  }
}

// Two ranks in one process and one thread: ncclCommInitRank for each device
// inside one group, then a grouped all-reduce across both.
TEST(SimNccl, SeveralRanksInOneThreadThroughAGroup) {
  auto r = RunChild([] {
    const Api& api = Load();
    ncclUniqueId id;
    SIM_NCCL(api.ncclGetUniqueId(&id));
    ncclComm_t comms[2];
    int* bufs[2];
    cudaStream_t streams[2];
    SIM_NCCL(api.ncclGroupStart());
    for (int d = 0; d < 2; ++d) {
      SIM_CUDA(api.cudaSetDevice(d));
      SIM_NCCL(api.ncclCommInitRank(&comms[d], 2, id, d));
    }
    SIM_NCCL(api.ncclGroupEnd());
    for (int d = 0; d < 2; ++d) {
      SIM_CUDA(api.cudaSetDevice(d));
      SIM_CUDA(api.cudaMalloc(reinterpret_cast<void**>(&bufs[d]), 4 * 3));
      SIM_CUDA(
          api.cudaStreamCreateWithFlags(&streams[d], cudaStreamNonBlocking));
      const int v[3] = {d + 1, 10 * (d + 1), 100 * (d + 1)};
      SIM_CUDA(api.cudaMemcpyAsync(bufs[d], v, 12, cudaMemcpyHostToDevice,
                                   streams[d]));
    }
    SIM_NCCL(api.ncclGroupStart());
    for (int d = 0; d < 2; ++d) {
      SIM_NCCL(api.ncclAllReduce(bufs[d], bufs[d], 3, ncclInt32, ncclSum,
                                 comms[d], streams[d]));
    }
    SIM_NCCL(api.ncclGroupEnd());
    for (int d = 0; d < 2; ++d) {
      int v[3];
      SIM_CUDA(api.cudaMemcpyAsync(v, bufs[d], 12, cudaMemcpyDeviceToHost,
                                   streams[d]));
      SIM_CHECK(v[0] == 3 && v[1] == 30 && v[2] == 300);
    }
    // Destroying inside a group would wait for the group: refused.
    SIM_NCCL(api.ncclGroupStart());
    SIM_CHECK(api.ncclCommDestroy(comms[0]) == ncclInvalidUsage);
    SIM_NCCL(api.ncclGroupEnd());
    for (int d = 0; d < 2; ++d) SIM_NCCL(api.ncclCommDestroy(comms[d]));
    SIM_CHECK(api.dksimContextMask() == 3u);
    return 0;
  });
  EXPECT_TRUE(r.ExitedWith(0)) << r.Describe();
}

// Non-blocking communicators: init and, with DKSIM_NCCL_INPROGRESS, every
// call report ncclInProgress; a call before ncclCommGetAsyncError says the
// last one finished is refused.
TEST(SimNccl, NonBlockingCommunicatorsReportInProgress) {
  Board* board = NewBoard();
  ExpectAllPass(RunChildren(
      2,
      [&](int rank) {
        const Api& api = Load();
        SIM_CUDA(api.cudaSetDevice(rank));
        ncclUniqueId id;
        SIM_CHECK(ShareId(api, board, rank, 0, &id));
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        config.blocking = 0;
        ncclComm_t comm = nullptr;
        SIM_CHECK(api.ncclCommInitRankConfig(&comm, 2, id, rank, &config) ==
                  ncclInProgress);
        SIM_CHECK(comm != nullptr);
        auto settle = [&] {
          ncclResult_t a = ncclInProgress;
          WaitUntil(
              [&] {
                api.ncclCommGetAsyncError(comm, &a);
                return a != ncclInProgress;
              },
              5000);
          return a;
        };
        SIM_CHECK(settle() == ncclSuccess);
        int* v;
        SIM_CUDA(api.cudaMalloc(reinterpret_cast<void**>(&v), 4));
        const int mine = rank + 5;
        SIM_CUDA(api.cudaMemcpy(v, &mine, 4, cudaMemcpyHostToDevice));
        SIM_CUDA(api.cudaDeviceSynchronize());
        SIM_CHECK(api.ncclAllReduce(v, v, 1, ncclInt32, ncclSum, comm,
                                    nullptr) == ncclInProgress);
        SIM_CHECK(api.ncclAllReduce(v, v, 1, ncclInt32, ncclSum, comm,
                                    nullptr) == ncclInvalidUsage);
        SIM_CHECK(settle() == ncclSuccess);
        int sum = 0;
        SIM_CUDA(api.cudaMemcpy(&sum, v, 4, cudaMemcpyDeviceToHost));
        SIM_CHECK(sum == 11);
        SIM_NCCL(api.ncclCommDestroy(comm));
        return 0;
      },
      {{"DKSIM_NCCL_INPROGRESS", "1"}}));
  munmap(board, sizeof(Board));
}

}  // namespace
}  // namespace dksim_test
