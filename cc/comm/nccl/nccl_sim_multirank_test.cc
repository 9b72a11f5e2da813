// The NCCL backend across real processes on the CUDA + NCCL simulator
// (testing/gpu_sim: device memory the host cannot touch, asynchronous
// streams with random delays, NCCL's one-thread-per-communicator rule),
// each rank on its own simulated device. Every value depends on rank and
// index and is computed here, so a swapped operation or a missing mean fails.
//
//   matrix   every operation x dtype x reduction NCCL expresses, 3 sizes
//   p2p      sends and receives beside collectives, in a different order on
//            odd and even ranks (one communicator shared by the lanes is a
//            concurrent call the simulator aborts on, or a deadlock); a
//            receive of another tag than the send's is refused
//   stream   an operation follows the caller's stream (SetCudaStream): the
//            input is written there asynchronously just before
//   groups   subgroups (ncclCommSplit) and cpu:gloo,cuda:nccl dispatch
//   misuse   tensors on two devices, a stream of another device (on one
//            rank: its peers fail naming it), an op after abort: clear
//            errors, no hang; a failed cudaEventRecord of an
//            op's end is an error; an op no other rank joins times out;
//            ranks that disagree on an op fail it on every rank (a barrier
//            against an all_reduce too); an op in flight at abort fails;
//            one rank's op after its abort fails every rank's, naming it
//   bool     sum and product are OR and AND (ncclMax, ncclMin)
//   teardown a channel half made is destroyed (no stream left); destroying
//            a group does not wait for another group's op in flight
//   device   a mean is ncclAvg (no host round trip), integers' too;
//            zeroing is a memset on the caller's stream
//   devices  this process made a CUDA context on its own device only
//   overlap  outputs that overlap their inputs on the device: all_to_all in
//            place, reduce_scatter, all_gather, gather and scatter with
//            the two in forms NCCL does not define (the group writes into a
//            device buffer of its own and copies it over) and in NCCL's own
//            in-place forms
//
// Prints the executed matrix (one line per operation and dtype).

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "cc/comm/backend_registry.h"
#include "cc/core/copy_stream.h"
#include "cc/core/cuda_library.h"
#include "cc/core/device_copy.h"
#include "cc/dist_api/collectives.h"
#include "cc/dist_api/dist.h"
#include "cc/group/process_group.h"
#include "testing/cc/dist_job.h"
#include "testing/cc/gpu_tensor.h"
#include "testing/cc/rank_check.h"
#include "testing/cc/sim_symbol.h"
#include "testing/cc/typed_values.h"

namespace distkit {
namespace {

using testing::Check;
using testing::CheckOk;
using testing::Require;
using testing::RequireOk;
using testing::SimSymbol;

int rank = 0;
int size = 1;
Device device;

const DataType kDtypes[] = {DataType::kFloat32, DataType::kFloat64,
                            DataType::kFloat16, DataType::kBFloat16,
                            DataType::kInt32,   DataType::kInt64,
                            DataType::kInt8,    DataType::kUInt8};
const ReduceOp kReductions[] = {ReduceOp::kSum, ReduceOp::kProduct,
                                ReduceOp::kMin, ReduceOp::kMax,
                                ReduceOp::kMean};
const int64_t kSizes[] = {1, 37, 1031};

// Rank r's input at index i: small integers, so every sum and product is
// exact in every dtype at world size <= 4; products keep to 2, 1, -1.
double Value(DataType dt, ReduceOp op, int r, int64_t i) {
  if (op == ReduceOp::kProduct) {
    const int k = (r + i) % 3;
    if (dt == DataType::kUInt8) return k == 0 ? 2 : 1;
    return k == 0 ? 2 : (k == 1 ? 1 : -1);
  }
  if (dt == DataType::kUInt8) return (r * 3 + i) % 11;
  return (r * 3 + i) % 11 - 5;
}

// What `op` over every rank's Value gives, rounded as the dtype stores it.
double Expected(DataType dt, ReduceOp op, int64_t i, int n) {
  const double reduced = testing::ReduceOverRanks(
      dt, op, n, [&](int r) { return Value(dt, op, r, i); });
  if (op != ReduceOp::kMean) return reduced;
  const int64_t sum = static_cast<int64_t>(reduced);
  if (!IsFloatingPoint(dt)) return static_cast<double>(sum / n);
  return static_cast<double>(sum) / n;
}

bool Close(double got, double want, DataType dt) {
  double tol = 0;
  if (dt == DataType::kFloat16) tol = std::abs(want) * 2e-3 + 1e-3;
  if (dt == DataType::kBFloat16) tol = std::abs(want) * 1e-2 + 1e-2;
  if (dt == DataType::kFloat32) tol = std::abs(want) * 1e-6;
  if (dt == DataType::kFloat64) tol = std::abs(want) * 1e-12;
  return std::abs(got - want) <= tol;
}

std::vector<double> Values(DataType dt, ReduceOp op, int r, int64_t n) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = Value(dt, op, r, i);
  return v;
}

// A scatter root's input of n elements per part: part k holds "rank k"'s
// sum values.
std::vector<double> PartsOfEveryRank(DataType dt, int64_t n) {
  std::vector<double> parts(n * size);
  for (int64_t i = 0; i < n * size; ++i) {
    parts[i] = Value(dt, ReduceOp::kSum, static_cast<int>(i / n), i % n);
  }
  return parts;
}

// (operation, dtype) -> the checks run; printed at the end.
std::map<std::string, int> matrix;

// First wrong element of `got` against want(i), or "" when all are right.
template <typename Want>
std::string Compare(const std::vector<double>& got, DataType dt, Want want) {
  for (size_t i = 0; i < got.size(); ++i) {
    const double w = want(static_cast<int64_t>(i));
    if (!Close(got[i], w, dt)) {
      return absl::StrCat("[", i, "] = ", got[i], ", want ", w);
    }
  }
  return "";
}

void Expect(const absl::Status& s, const std::string& what,
            const std::string& wrong, DataType dt) {
  ++matrix[absl::StrCat(what.substr(0, what.find(' ')), " ", DataTypeName(dt))];
  CheckOk(s, what);
  if (s.ok()) Check(wrong.empty(), absl::StrCat(what, ": ", wrong));
}

void Matrix(ProcessGroup& g) {
  for (DataType dt : kDtypes) {
    const std::string type(DataTypeName(dt));
    for (int64_t n : kSizes) {
      const std::string at = absl::StrCat(type, " x", n);
      for (ReduceOp op : kReductions) {
        const std::string name(ReduceOpName(op));
        GpuTensor t(dt, Values(dt, op, rank, n), device);
        absl::Status s = g.AllReduce(t.ref(), op);
        Expect(s, absl::StrCat("all_reduce ", name, " ", at),
               Compare(t.Read(), dt,
                       [&](int64_t i) { return Expected(dt, op, i, size); }),
               dt);
        const int root = size - 1;
        GpuTensor r(dt, Values(dt, op, rank, n), device);
        s = g.Reduce(r.ref(), op, root);
        Expect(s, absl::StrCat("reduce ", name, " ", at),
               rank != root ? ""
                            : Compare(r.Read(), dt,
                                      [&](int64_t i) {
                                        return Expected(dt, op, i, size);
                                      }),
               dt);
        // reduce_scatter: rank r's input holds every part k as the values of
        // "rank r" at index k * n + i; part r of the result is theirs reduced.
        std::vector<double> whole(n * size);
        for (int64_t i = 0; i < n * size; ++i)
          whole[i] = Value(dt, op, rank, i);
        GpuTensor in(dt, whole, device);
        GpuTensor out(dt, std::vector<double>(n, 0), device);
        s = g.ReduceScatter(in.ref(), out.ref(), op);
        Expect(s, absl::StrCat("reduce_scatter ", name, " ", at),
               Compare(out.Read(), dt,
                       [&](int64_t i) {
                         return Expected(dt, op, rank * n + i, size);
                       }),
               dt);
      }
      const ReduceOp plain = ReduceOp::kSum;
      auto of = [&](int r, int64_t i) { return Value(dt, plain, r, i); };
      const int root = size - 1;
      GpuTensor b(dt, Values(dt, plain, rank, n), device);
      absl::Status s = g.Broadcast(b.ref(), root);
      Expect(s, "broadcast " + at,
             Compare(b.Read(), dt, [&](int64_t i) { return of(root, i); }), dt);
      GpuTensor mine(dt, Values(dt, plain, rank, n), device);
      GpuTensor all(dt, std::vector<double>(n * size, 0), device);
      s = g.AllGather(mine.ref(), all.ref());
      Expect(
          s, "all_gather " + at,
          Compare(all.Read(), dt, [&](int64_t i) { return of(i / n, i % n); }),
          dt);
      GpuTensor gathered(dt, std::vector<double>(n * size, 0), device);
      s = g.Gather(mine.ref(), gathered.ref(), 0);
      Expect(s, "gather " + at,
             rank != 0 ? ""
                       : Compare(gathered.Read(), dt,
                                 [&](int64_t i) { return of(i / n, i % n); }),
             dt);
      // scatter: the root's input part k is "rank k"'s values.
      GpuTensor source(dt, PartsOfEveryRank(dt, n), device);
      GpuTensor part(dt, std::vector<double>(n, 0), device);
      s = g.Scatter(source.ref(), part.ref(), root);
      Expect(s, "scatter " + at,
             Compare(part.Read(), dt, [&](int64_t i) { return of(rank, i); }),
             dt);
      // all_to_all: rank r sends part k (r's values at k * n + i) to rank k.
      std::vector<double> send(n * size);
      for (int64_t i = 0; i < n * size; ++i) send[i] = of(rank, i);
      GpuTensor a2a_in(dt, send, device);
      GpuTensor a2a_out(dt, std::vector<double>(n * size, 0), device);
      s = g.AllToAll(a2a_in.ref(), a2a_out.ref());
      Expect(s, "all_to_all " + at,
             Compare(a2a_out.Read(), dt,
                     [&](int64_t i) {
                       return of(static_cast<int>(i / n), rank * n + i % n);
                     }),
             dt);
    }
  }
  CheckOk(g.Barrier(), "barrier");
}

// Sends and receives beside collectives, issued asynchronously in an order
// that differs between odd and even ranks.
void PointToPointBesideCollectives(ProcessGroup& g) {
  if (size == 1) return;
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  const DataType dt = DataType::kFloat32;
  for (int round = 0; round < 10; ++round) {
    GpuTensor sum(dt, Values(dt, ReduceOp::kSum, rank + round, 41), device);
    GpuTensor sent(dt, Values(dt, ReduceOp::kSum, rank * 7 + round, 29),
                   device);
    GpuTensor got(dt, std::vector<double>(29, 0), device);
    std::vector<std::shared_ptr<Work>> works;
    if (rank % 2 == 0) {
      works.push_back(g.AllReduceAsync(sum.ref(), ReduceOp::kSum));
      works.push_back(g.SendAsync(sent.ref(), next, 0));
      works.push_back(g.RecvAsync(got.ref(), prev, 0));
    } else {
      works.push_back(g.RecvAsync(got.ref(), prev, 0));
      works.push_back(g.SendAsync(sent.ref(), next, 0));
      works.push_back(g.AllReduceAsync(sum.ref(), ReduceOp::kSum));
    }
    for (auto& w : works) CheckOk(w->Wait(absl::Seconds(60)), w->description());
    ++matrix["send+recv beside all_reduce float32"];
    Check(Compare(got.Read(), dt,
                  [&](int64_t i) {
                    return Value(dt, ReduceOp::kSum, prev * 7 + round, i);
                  })
              .empty(),
          absl::StrCat("round ", round, ": recv from rank ", prev));
    Check(Compare(sum.Read(), dt,
                  [&](int64_t i) {
                    double s = 0;
                    for (int r = 0; r < size; ++r)
                      s += Value(dt, ReduceOp::kSum, r + round, i);
                    return s;
                  })
              .empty(),
          absl::StrCat("round ", round, ": all_reduce beside p2p"));
  }
  // NCCL has no tags: a receive of another tag than the send's is refused
  // from the header (the data dropped), and the pair stays in step.
  if (rank > 1) return;
  GpuTensor sent(dt, Values(dt, ReduceOp::kSum, 5, 29), device);
  GpuTensor got(dt, std::vector<double>(29, 0), device);
  for (int tag : {7, 9}) {
    if (rank == 0) {
      CheckOk(g.Send(sent.ref(), 1, tag), absl::StrCat("send tag ", tag));
      continue;
    }
    const absl::Status st = g.Recv(got.ref(), 0, 8);
    Check(st.code() == absl::StatusCode::kInvalidArgument &&
              absl::StrContains(st.message(), absl::StrCat("tag ", tag)) &&
              absl::StrContains(st.message(), "tag 8"),
          absl::StrCat("a tag-8 receive of a tag-", tag,
                       " send is refused, not ", st.ToString()));
  }
  if (rank == 0) {
    CheckOk(g.Send(sent.ref(), 1, 8), "send tag 8");
  } else {
    CheckOk(g.Recv(got.ref(), 0, 8), "recv tag 8");
    Check(Compare(got.Read(), dt,
                  [&](int64_t i) { return Value(dt, ReduceOp::kSum, 5, i); })
              .empty(),
          "the tag-8 receive after two refused ones");
  }
  ++matrix["recv of another tag refused"];
}

// A non-blocking stream of the caller's (stops the rank when it cannot be
// made).
cudaStream_t CallersStream(const CudaLibrary& cuda) {
  cudaStream_t stream;
  RequireOk(
      CudaStatus(cuda,
                 cuda.StreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                 "cudaStreamCreateWithFlags"),
      "a stream of the caller's");
  return stream;
}

// The input is written on the caller's non-blocking stream just before the
// operation; the group follows that stream, so the op reads the new values.
void FollowsTheCallersStream(ProcessGroup& g, const CudaLibrary& cuda) {
  const DataType dt = DataType::kFloat32;
  const int64_t n = 1 << 16;
  cudaStream_t stream = CallersStream(cuda);
  RequireOk(g.SetCudaStream(stream), "SetCudaStream");
  for (int round = 0; round < 5; ++round) {
    GpuTensor t(dt, std::vector<double>(n, 0), device);
    std::vector<float> host(n);
    for (int64_t i = 0; i < n; ++i) {
      host[i] = static_cast<float>(Value(dt, ReduceOp::kSum, rank + round, i));
    }
    // Pieces, each a queued copy: the last lands well after the first.
    const int64_t piece = n / 8;
    for (int64_t at = 0; at < n; at += piece) {
      CheckOk(
          CudaStatus(cuda,
                     cuda.MemcpyAsync(static_cast<float*>(t.ref().data()) + at,
                                      host.data() + at, piece * sizeof(float),
                                      cudaMemcpyHostToDevice, stream),
                     "cudaMemcpyAsync"),
          "fill on the caller's stream");
    }
    std::shared_ptr<Work> w = g.AllReduceAsync(t.ref(), ReduceOp::kSum);
    CheckOk(w->Wait(absl::Seconds(60)), "all_reduce after the caller's copy");
    // At world size 1 nothing moves, so the op has no device work that
    // would follow the copy; the caller reads after its own stream.
    if (size == 1) cuda.StreamSynchronize(stream);
    ++matrix["all_reduce on the caller's stream float32"];
    const std::string wrong = Compare(t.Read(), dt, [&](int64_t i) {
      double s = 0;
      for (int r = 0; r < size; ++r)
        s += Value(dt, ReduceOp::kSum, r + round, i);
      return s;
    });
    Check(wrong.empty(),
          absl::StrCat(
              "round ", round,
              ": the all_reduce read the caller's stream's data: ", wrong));
  }
  CheckOk(g.SetCudaStream(nullptr), "back to the legacy stream");
  CheckOk(cuda.StreamSynchronize(stream) == cudaSuccess
              ? absl::OkStatus()
              : absl::InternalError("cudaStreamSynchronize"),
          "stream drained");
  cuda.StreamDestroy(stream);
}

void Groups(ProcessGroup& world) {
  // Every other rank, split from the world's communicator.
  std::vector<int> evens;
  for (int r = 0; r < size; r += 2) evens.push_back(r);
  absl::StatusOr<std::shared_ptr<ProcessGroup>> sub = world.NewGroup(evens);
  RequireOk(sub.status(), "ncclCommSplit subgroup of the even ranks");
  if (rank % 2 == 0) {
    const DataType dt = DataType::kInt64;
    GpuTensor t(dt, Values(dt, ReduceOp::kMax, rank, 19), device);
    CheckOk((*sub)->AllReduce(t.ref(), ReduceOp::kMax), "subgroup all_reduce");
    ++matrix["all_reduce max in a split subgroup int64"];
    Check(Compare(t.Read(), dt,
                  [&](int64_t i) {
                    double m = -1e9;
                    for (int r : evens)
                      m = std::max(m, Value(dt, ReduceOp::kMax, r, i));
                    return m;
                  })
              .empty(),
          "subgroup max over the even ranks");
  }
  // Made by its members alone (as torch.distributed creates a backend's
  // groups): the odd ranks, last first, with a new communicator through the
  // store; the even ranks make one of their own at the same time.
  std::vector<int> mine;
  for (int r = size - 1; r >= 0; --r)
    if (r % 2 == rank % 2) mine.push_back(r);
  GroupOptions only;
  only.backend = "nccl";
  only.members_only = true;
  only.name = rank % 2 == 0 ? "evens" : "odds";
  absl::StatusOr<std::shared_ptr<ProcessGroup>> own =
      world.NewGroup(mine, only);
  RequireOk(own.status(), "a subgroup its members alone create");
  {
    const DataType dt = DataType::kFloat32;
    GpuTensor t(dt, Values(dt, ReduceOp::kSum, rank, 23), device);
    CheckOk((*own)->AllReduce(t.ref(), ReduceOp::kSum),
            "members-only subgroup all_reduce");
    ++matrix["all_reduce sum in a members-only subgroup float32"];
    Check((*own)->rank() ==
              static_cast<int>(std::find(mine.begin(), mine.end(), rank) -
                               mine.begin()),
          "members-only subgroup: ranks in the order given");
    Check(Compare(t.Read(), dt,
                  [&](int64_t i) {
                    double sum = 0;
                    for (int r : mine) sum += Value(dt, ReduceOp::kSum, r, i);
                    return sum;
                  })
              .empty(),
          "members-only subgroup sum over its ranks");
  }
  // cpu:gloo,cuda:nccl: host tensors through Gloo, CUDA ones through NCCL.
  GroupOptions dispatch;
  dispatch.backend = "cpu:gloo,cuda:nccl";
  std::vector<int> everyone;
  for (int r = 0; r < size; ++r) everyone.push_back(r);
  absl::StatusOr<std::shared_ptr<ProcessGroup>> both =
      world.NewGroup(everyone, dispatch);
  RequireOk(both.status(), "cpu:gloo,cuda:nccl group");
  std::vector<float> host = {1.f * rank, 2.f, -3.f};
  CheckOk((*both)->AllReduce(TensorRef(host.data(), 3, DataType::kFloat32),
                             ReduceOp::kSum),
          "dispatch: a host tensor");
  Check(host[0] == size * (size - 1) / 2.f && host[1] == 2.f * size,
        "dispatch: host values summed");
  GpuTensor t(DataType::kFloat32, {1.0 * rank, 4.0}, device);
  CheckOk((*both)->AllReduce(t.ref(), ReduceOp::kSum),
          "dispatch: a CUDA tensor");
  Check(t.Read() == std::vector<double>({size * (size - 1) / 2.0, 4.0 * size}),
        "dispatch: CUDA values summed");
  ++matrix["all_reduce sum through cpu:gloo,cuda:nccl float32"];
  // Rank 0 on a host tensor, the others on CUDA ones of the same dtype and
  // count: the two halves never meet, so the signature names each rank's
  // path and every rank refuses. Before, the signatures agreed: rank 0 took
  // the others' (stale) inline payloads as a result and returned OK while
  // they waited in NCCL.
  if (size > 1) {
    std::vector<float> mixed_host = {7.f, 7.f};
    GpuTensor mixed(DataType::kFloat32, {7.0, 7.0}, device);
    const absl::Status st =
        rank == 0 ? (*both)->AllReduce(
                        TensorRef(mixed_host.data(), 2, DataType::kFloat32),
                        ReduceOp::kSum)
                  : (*both)->AllReduce(mixed.ref(), ReduceOp::kSum);
    std::string others;
    for (int r = 1; r < size; ++r) {
      absl::StrAppend(&others, r == 1 ? "" : ", ", r);
    }
    Check(
        st.code() == absl::StatusCode::kInvalidArgument &&
            absl::StrContains(st.message(), "rank(s) 0 called all_reduce #") &&
            absl::StrContains(
                st.message(),
                absl::StrCat(" float32 x2 op=sum on cpu; rank(s) ", others,
                             " called all_reduce #")) &&
            absl::StrContains(st.message(), " float32 x2 op=sum on cuda"),
        absl::StrCat("dispatch: ranks on different devices: ", st.ToString()));
    Check(mixed_host[0] == 7.f && mixed.Read()[0] == 7.0,
          "dispatch: a refused call leaves the data");
    CheckOk((*both)->AllReduce(t.ref(), ReduceOp::kSum),
            "dispatch: the group after the refusal");
  }
  // The casting rule: a host tensor through the dist API on an NCCL world.
  std::vector<double> cast = {0.5 * rank, 1.0};
  CheckOk(dist::AllReduce(TensorRef(cast.data(), 2, DataType::kFloat64), "sum"),
          "dist::all_reduce of a host tensor on nccl");
  Check(cast[0] == 0.5 * size * (size - 1) / 2 && cast[1] == size,
        "casting: host -> device -> host");
  ++matrix["dist::all_reduce of host memory float64"];
}

void Misuse(ProcessGroup& world, const CudaLibrary& /*cuda*/) {
  // Input and output on two devices in one call.
  const Device other = Device::Cuda((device.index + 1) % CudaDeviceCount());
  if (other != device) {
    GpuTensor in(DataType::kFloat32, {1, 2}, device);
    GpuTensor out(DataType::kFloat32, std::vector<double>(2 * size, 0), other);
    absl::Status s = world.AllGather(in.ref(), out.ref());
    Check(s.code() == absl::StatusCode::kInvalidArgument &&
              absl::StrContains(s.message(), other.ToString()),
          "tensors on two devices: INVALID_ARGUMENT naming " +
              other.ToString() + ": " + s.ToString());
  }
  // An operation after abort: an error, at once.
  std::vector<int> everyone;
  for (int r = 0; r < size; ++r) everyone.push_back(r);
  absl::StatusOr<std::shared_ptr<ProcessGroup>> doomed =
      world.NewGroup(everyone);
  RequireOk(doomed.status(), "a group to abort");
  (*doomed)->Abort();
  GpuTensor t(DataType::kFloat32, {1, 2}, device);
  const absl::Time start = absl::Now();
  absl::Status s = (*doomed)->AllReduce(t.ref(), ReduceOp::kSum);
  Check(!s.ok() && absl::Now() - start < absl::Seconds(5),
        "an op after abort fails at once: " + s.ToString());
}

// After warm-up (the matrix ran every operation), operations allocate no
// device memory: staging is kept per channel, not cudaMalloc'd per call.
void NoAllocationPerOp(ProcessGroup& g) {
  auto mallocs = reinterpret_cast<long (*)(int)>(SimSymbol("dksimMallocCount"));
  const DataType dt = DataType::kFloat32;
  GpuTensor a(dt, Values(dt, ReduceOp::kSum, rank, 1031), device);
  GpuTensor all(dt, std::vector<double>(1031 * size, 0), device);
  // Operations that stage through device memory of their own: the list
  // form of all_gather, and a host tensor through the casting rule.
  std::vector<GpuTensor> parts;
  std::vector<TensorRef> outputs;
  for (int r = 0; r < size; ++r) {
    parts.emplace_back(dt, std::vector<double>(1031, 0), device);
  }
  for (auto& p : parts) outputs.push_back(p.ref());
  std::vector<float> host(64, 1.f);
  auto staged_ops = [&] {
    CheckOk(g.AllGather(a.ref(), outputs), "all_gather into a list");
    CheckOk(dist::AllReduce(TensorRef(host.data(), 64, dt), "sum"),
            "dist::all_reduce of host memory");
  };
  staged_ops();  // warm-up
  const long before = mallocs(device.index);
  for (int i = 0; i < 20; ++i) {
    CheckOk(g.AllReduce(a.ref(), ReduceOp::kMax), "warm all_reduce");
    CheckOk(g.AllGather(a.ref(), all.ref()), "warm all_gather");
    CheckOk(g.Barrier(), "warm barrier");
    staged_ops();
  }
  if (size > 1) {
    const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    for (int i = 0; i < 10; ++i) {
      auto s = g.SendAsync(a.ref(), next, 0);
      auto r = g.RecvAsync(all.ref().Slice(0, 1031), prev, 0);
      CheckOk(s->Wait(absl::Seconds(60)), "warm send");
      CheckOk(r->Wait(absl::Seconds(60)), "warm recv");
    }
  }
  const long after = mallocs(device.index);
  Check(after == before,
        absl::StrCat("after warm-up, 130 operations made ", after - before,
                     " device allocations (want 0)"));
  ++matrix["no device allocation per op after warm-up float32"];
}

// Work that stays on the device (issue 35, item 6), told by the simulator's
// counts of copies and memsets:
// - a mean is folded into the reduction (ncclAvg), integers' too: it copies
//   nothing more than a sum (the op's own signature, a small copy each way);
//   the simulator divides an integer sum toward zero as NCCL's SumPostDiv;
// - zeroing device memory (ZeroBytes: the reducer's buckets, FlatShard's
//   gradients) is a memset, never a copy from the host, and inside a
//   CopyStreamScope it runs on the caller's stream, after its earlier work.
void MeanAndZeroOnTheDevice(ProcessGroup& g, const CudaLibrary& cuda) {
  auto copies = reinterpret_cast<long (*)(int)>(SimSymbol("dksimCopyCount"));
  auto memsets = reinterpret_cast<long (*)()>(SimSymbol("dksimMemsetCount"));
  auto sleep_on = reinterpret_cast<cudaError_t (*)(cudaStream_t, long)>(
      SimSymbol("dksimStreamSleep"));
  // The copies (to the device, to the host) one all_reduce made.
  auto cost = [&](DataType dt, ReduceOp op) {
    GpuTensor t(dt, Values(dt, op, rank, 1031), device);
    const long to_device = copies(1), to_host = copies(2);
    CheckOk(g.AllReduce(t.ref(), op), "all_reduce");
    const std::pair<long, long> made(copies(1) - to_device,
                                     copies(2) - to_host);
    const std::string wrong = Compare(
        t.Read(), dt, [&](int64_t i) { return Expected(dt, op, i, size); });
    Check(wrong.empty(), absl::StrCat("all_reduce ", ReduceOpName(op), " ",
                                      DataTypeName(dt), ": ", wrong));
    return made;
  };
  if (size > 1) {
    // Integers as well: NCCL divides the wrapped sum toward zero (Expected
    // computes the truncated mean; Value has negative sums at every size).
    for (DataType dt :
         {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16,
          DataType::kFloat64, DataType::kInt8, DataType::kUInt8,
          DataType::kInt32, DataType::kInt64}) {
      const auto sum = cost(dt, ReduceOp::kSum);
      const auto mean = cost(dt, ReduceOp::kMean);
      Check(mean == sum,
            absl::StrCat(DataTypeName(dt), " mean folded into the reduction: ",
                         mean.first, " copies to the device and ", mean.second,
                         " to the host, a sum's ", sum.first, " and ",
                         sum.second));
      ++matrix[absl::StrCat("mean as ncclAvg ", DataTypeName(dt))];
    }
  }
  // Zeroing, blocking: a memset, no copy.
  const DataType dt = DataType::kFloat32;
  GpuTensor z(dt, Values(dt, ReduceOp::kSum, rank + 1, 1031), device);
  long to_device = copies(1), set = memsets();
  CheckOk(ZeroBytes(z.ref().data(), device, z.ref().nbytes()), "ZeroBytes");
  Check(copies(1) == to_device && memsets() == set + 1,
        absl::StrCat("ZeroBytes is one memset (", memsets() - set,
                     ") and no copy to the device (", copies(1) - to_device,
                     ")"));
  Check(Compare(z.Read(), dt, [](int64_t) { return 0.0; }).empty(),
        "ZeroBytes zeroed");
  // On the caller's stream: values written there after 50 ms of device work,
  // then zeroed in a scope on it. Zeroing anywhere else runs before the
  // values land, which then remain.
  cudaStream_t stream = CallersStream(cuda);
  const std::vector<float> values(1031, 7.f);
  RequireOk(CudaStatus(cuda, sleep_on(stream, 50000), "dksimStreamSleep"),
            "device work on the caller's stream");
  RequireOk(CudaStatus(cuda,
                       cuda.MemcpyAsync(z.ref().data(), values.data(),
                                        z.ref().nbytes(),
                                        cudaMemcpyHostToDevice, stream),
                       "cudaMemcpyAsync"),
            "values on the caller's stream");
  to_device = copies(1);
  {
    CopyStreamScope on(device, stream);
    CheckOk(ZeroBytes(z.ref().data(), device, z.ref().nbytes()),
            "ZeroBytes on the caller's stream");
  }
  Check(copies(1) == to_device, "no copy to the device on the stream either");
  CheckOk(
      CudaStatus(cuda, cuda.StreamSynchronize(stream), "cudaStreamSynchronize"),
      "the caller's stream");
  Check(Compare(z.Read(), dt, [](int64_t) { return 0.0; }).empty(),
        "ZeroBytes in a scope runs after the stream's earlier work");
  ++matrix["zeroing by memset, on the caller's stream float32"];
  cuda.StreamDestroy(stream);
}

// A new nccl group of every rank with its own timeout (each misuse case
// spoils a group of its own); stops the rank when it cannot be made.
absl::StatusOr<std::shared_ptr<ProcessGroup>> NcclGroupOfEveryone(
    ProcessGroup& world, absl::Duration timeout, const std::string& what) {
  std::vector<int> everyone;
  for (int r = 0; r < size; ++r) everyone.push_back(r);
  GroupOptions options;
  options.backend = "nccl";
  options.timeout = timeout;
  // Making the communicator is not what a short timeout here tests.
  options.connect_timeout = absl::Seconds(30);
  absl::StatusOr<std::shared_ptr<ProcessGroup>> g =
      world.NewGroup(everyone, options);
  RequireOk(g.status(), what);
  return g;
}

// A failed cudaEventRecord of an operation's end is an error, not an
// operation that "completed" before it ran: the simulator fails the third
// record from now on every rank (the issue mark is the first, the
// signatures' arrival the second, the operation's end the third; a lone
// rank sends no signature, so there the end is the second).
void FailedRecordIsAnError(ProcessGroup& world) {
  auto fail =
      reinterpret_cast<void (*)(long)>(SimSymbol("dksimFailEventRecord"));
  absl::StatusOr<std::shared_ptr<ProcessGroup>> g = NcclGroupOfEveryone(
      world, absl::Seconds(10), "a group whose operation's event fails");
  GpuTensor t(DataType::kFloat32, {1.0 * rank, 2}, device);
  CheckOk((*g)->AllReduce(t.ref(), ReduceOp::kSum), "warm-up all_reduce");
  CheckOk(world.Barrier(), "every rank warmed up");
  fail(size > 1 ? 2 : 1);
  absl::Status s = (*g)->AllReduce(t.ref(), ReduceOp::kSum);
  fail(-1);
  ++matrix["a failed cudaEventRecord fails the op float32"];
  Check(
      !s.ok() && absl::StrContains(s.message(), "cudaEventRecord"),
      "a failed record of the op's end is an error naming it: " + s.ToString());
  CheckOk(world.Barrier(), "every rank saw its error");
}

// Whether `s` is ABORTED with a message that names every one of `parts`:
// how every rank of a group ends an operation its ranks disagree on.
bool AbortedNaming(const absl::Status& s,
                   std::initializer_list<absl::string_view> parts) {
  if (s.code() != absl::StatusCode::kAborted) return false;
  for (absl::string_view part : parts) {
    if (!absl::StrContains(s.message(), part)) return false;
  }
  return true;
}

// Ranks that disagree on an operation (here its element count) all fail it
// with ABORTED naming each rank's call: NCCL checks the agreement alongside
// the operation, which had started, so the group is aborted (a mismatch that
// would hang NCCL ends at once).
void DisagreementAbortsTheGroup(ProcessGroup& world) {
  if (size == 1) return;
  absl::StatusOr<std::shared_ptr<ProcessGroup>> g =
      NcclGroupOfEveryone(world, absl::Seconds(30), "a group to disagree on");
  const int64_t n = rank == 0 ? 4 : 8;
  GpuTensor t(DataType::kFloat32, std::vector<double>(n, 1), device);
  const absl::Time start = absl::Now();
  absl::Status s = (*g)->AllReduce(t.ref(), ReduceOp::kSum);
  Check(AbortedNaming(s, {"disagree", "float32 x4", "float32 x8"}),
        "a count mismatch: ABORTED naming both calls, on every rank: " +
            s.ToString());
  Check(absl::Now() - start < absl::Seconds(10),
        "the mismatch ended the operation before its timeout");
  s = (*g)->AllReduce(t.ref(), ReduceOp::kSum);
  Check(!s.ok(), "the group is unusable after: " + s.ToString());
  ++matrix["all_reduce count mismatch float32"];
  CheckOk(world.Barrier(), "every rank saw the mismatch");
}

// A barrier on one rank against an all_reduce on the others: the barrier's
// exchange meets the all_reduce's alongside signatures, and every rank ends
// with ABORTED (none keeps a group its peers have aborted).
void BarrierAgainstAllReduce(ProcessGroup& world) {
  if (size == 1) return;
  absl::StatusOr<std::shared_ptr<ProcessGroup>> g =
      NcclGroupOfEveryone(world, absl::Seconds(30), "a group to disagree on");
  GpuTensor t(DataType::kFloat32, {1, 2, 3, 4}, device);
  absl::Status s =
      rank == 0 ? (*g)->Barrier() : (*g)->AllReduce(t.ref(), ReduceOp::kSum);
  Check(AbortedNaming(s, {"barrier", "all_reduce"}),
        "a barrier against an all_reduce: ABORTED naming both, on every "
        "rank: " +
            s.ToString());
  ++matrix["barrier against all_reduce"];
  CheckOk(world.Barrier(), "every rank saw the mismatch");
}

// An operation in flight when its group is aborted ends with an error, not
// OK: its kernels exit early, and the end event then completes too.
void AbortEndsAnOperationInFlight(ProcessGroup& world) {
  if (size == 1) return;
  absl::StatusOr<std::shared_ptr<ProcessGroup>> g =
      NcclGroupOfEveryone(world, absl::Seconds(30), "a group to abort");
  if (rank == 0) {
    // The others never join: the all_reduce waits until aborted.
    GpuTensor t(DataType::kFloat32, {1, 2}, device);
    std::shared_ptr<Work> w = (*g)->AllReduceAsync(t.ref(), ReduceOp::kSum);
    // And a send whose receiver never comes: its pair communicator is still
    // being made (rank 1 never reads the id) when the abort comes.
    GpuTensor u(DataType::kFloat32, {3, 4}, device);
    std::shared_ptr<Work> sent = (*g)->SendAsync(u.ref(), 1, 0);
    absl::SleepFor(absl::Milliseconds(200));
    Check(!w->Test(), "the all_reduce waits for peers that never come");
    Check(!sent->Test(), "the send waits for a receiver that never comes");
    const absl::Time start = absl::Now();
    (*g)->Abort();
    absl::Status s = w->Wait(absl::Seconds(20));
    Check(!s.ok() && s.code() != absl::StatusCode::kDeadlineExceeded,
          "an all_reduce in flight at abort fails: " + s.ToString());
    s = sent->Wait(absl::Seconds(20));
    Check(
        !s.ok() && s.code() != absl::StatusCode::kDeadlineExceeded,
        "a send still making its communicator at abort fails: " + s.ToString());
    Check(absl::Now() - start < absl::Seconds(10), "soon after the abort");
    ++matrix["all_reduce in flight at abort"];
  }
  CheckOk(world.Barrier(), "every rank past the abort");
  // The others abort their side only now: an abort reaches the peers (their
  // operations end), which would end rank 0's before its own abort.
  if (rank != 0) (*g)->Abort();
}

// Bad input on one rank only: the last rank aborts its group and issues an
// all_reduce on it, the others issue theirs as usual. The last rank's fails
// at once; the others' end at its abort (a departed peer), well before the
// 30 s timeout, naming the rank that never joined, not a hang.
void AbortOnOneRank(ProcessGroup& world) {
  if (size == 1) return;
  const int last = size - 1;
  absl::StatusOr<std::shared_ptr<ProcessGroup>> g =
      NcclGroupOfEveryone(world, absl::Seconds(30), "a group one rank aborts");
  GpuTensor t(DataType::kFloat32, {1, 2}, device);
  if (rank == last) (*g)->Abort();
  const absl::Time start = absl::Now();
  absl::Status s = (*g)->AllReduce(t.ref(), ReduceOp::kSum);
  const absl::Duration took = absl::Now() - start;
  if (rank == last) {
    Check(!s.ok() && took < absl::Seconds(5),
          "an op after abort on this rank fails at once: " + s.ToString());
  } else {
    Check(s.code() == absl::StatusCode::kUnavailable &&
              absl::StrContains(s.message(), "all_reduce") &&
              absl::StrContains(s.message(), (*g)->name()) &&
              absl::StrContains(s.message(), absl::StrCat("rank(s) ", last,
                                                          " never joined it")),
          absl::StrCat("the others' all_reduce with a rank that aborted "
                       "fails naming op, group and rank ",
                       last, ": ", s.ToString()));
    Check(took < absl::Seconds(10),
          absl::StrCat("soon after the peer's abort, not at the timeout: ",
                       absl::FormatDuration(took)));
  }
  ++matrix["op after abort on one rank"];
  CheckOk(world.Barrier(), "every rank past the one-sided abort");
}

// A group that one rank aborted (poisoned there alone: an abort is local)
// is still a parent: every rank makes its subgroup the same way (afresh,
// since that rank can no longer split), where before that rank connected
// afresh while the others split, each side waiting for the other to the
// timeout.
void SubgroupAfterAOneSidedAbort(ProcessGroup& world) {
  if (size == 1) return;
  const int last = size - 1;
  absl::StatusOr<std::shared_ptr<ProcessGroup>> g = NcclGroupOfEveryone(
      world, absl::Seconds(20), "a group one rank aborts before a split");
  if (rank == last) (*g)->Abort();
  std::vector<int> everyone;
  for (int r = 0; r < size; ++r) everyone.push_back(r);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::shared_ptr<ProcessGroup>> child =
      (*g)->NewGroup(everyone);
  CheckOk(child.status(), "a subgroup of a group one rank aborted");
  if (child.ok()) {
    GpuTensor t(DataType::kFloat32, {1.0 * rank, 4.0}, device);
    CheckOk((*child)->AllReduce(t.ref(), ReduceOp::kSum),
            "the subgroup's all_reduce");
    Check(
        t.Read() == std::vector<double>({size * (size - 1) / 2.0, 4.0 * size}),
        "the subgroup's sum");
  }
  Check(absl::Now() - start < absl::Seconds(15),
        "made at once, not at the parent's timeout");
  ++matrix["subgroup of a group one rank aborted float32"];
  CheckOk(world.Barrier(), "every rank past the subgroup");
}

// An operation no other rank joins ends at its group's timeout with
// DEADLINE_EXCEEDED naming it (the communicator is aborted), not a hang.
void TimeoutEndsTheOperation(ProcessGroup& world) {
  if (size == 1) return;
  absl::StatusOr<std::shared_ptr<ProcessGroup>> g = NcclGroupOfEveryone(
      world, absl::Seconds(1), "a group with a 1 s timeout");
  if (rank == 0) {
    GpuTensor t(DataType::kFloat32, {1, 2}, device);
    const absl::Time start = absl::Now();
    absl::Status s = (*g)->AllReduce(t.ref(), ReduceOp::kSum);
    const absl::Duration took = absl::Now() - start;
    Check(s.code() == absl::StatusCode::kDeadlineExceeded &&
              absl::StrContains(s.message(), "all_reduce"),
          "an all_reduce no other rank joins: DEADLINE_EXCEEDED naming it: " +
              s.ToString());
    Check(took < absl::Seconds(10),
          absl::StrCat("it ended at the timeout, after ",
                       absl::FormatDuration(took)));
    ++matrix["all_reduce alone: timeout float32"];
  }
  CheckOk(world.Barrier(), "every rank past the timeout");
  // The others never used it; rank 0's side is gone, so they abort theirs
  // rather than let destruction wait out a flush no peer answers.
  (*g)->Abort();
}

// Every rank reaches an all_reduce on the host in time, but the last rank's
// device is still busy with work queued before it on its stream (4 s of
// simulated device work, a 1 s timeout): the ranks end at the timeout (or at
// a peer's abort), and the diagnosis names the last rank as the one whose
// device had not started the operation, the others as inside it, instead of
// "a peer may be slow". The device stays busy past the diagnosis window
// (2 s): the last rank answers the roll call before its stream drains.
void LateDeviceIsNamed(ProcessGroup& world, const CudaLibrary& cuda) {
  if (size == 1) return;
  const int last = size - 1;
  auto sleep_on = reinterpret_cast<cudaError_t (*)(cudaStream_t, long)>(
      SimSymbol("dksimStreamSleep"));
  absl::StatusOr<std::shared_ptr<ProcessGroup>> g = NcclGroupOfEveryone(
      world, absl::Seconds(1), "a group whose last rank's device is late");
  cudaStream_t stream = CallersStream(cuda);
  RequireOk((*g)->SetCudaStream(stream), "SetCudaStream");
  GpuTensor t(DataType::kFloat32, {1.0 * rank, 2}, device);
  CheckOk(world.Barrier(), "every rank ready");
  if (rank == last) {
    RequireOk(CudaStatus(cuda, sleep_on(stream, 4000000), "dksimStreamSleep"),
              "device work queued before the all_reduce");
  }
  absl::Status s = (*g)->AllReduce(t.ref(), ReduceOp::kSum);
  std::vector<int> others;
  for (int r = 0; r < last; ++r) others.push_back(r);
  const std::string late = absl::StrCat(
      "every rank reached this operation, but rank ", last,
      "'s device had not started it (work queued before it on the stream it "
      "was issued on was still running)");
  const std::string inside =
      others.size() == 1 ? "rank 0 was inside it on its device"
                         : absl::StrCat("ranks ", absl::StrJoin(others, ", "),
                                        " were inside it on their devices");
  Check(!s.ok() && absl::StrContains(s.message(), "all_reduce") &&
            absl::StrContains(s.message(), late) &&
            absl::StrContains(s.message(), inside),
        absl::StrCat("every rank names rank ", last,
                     " as the one whose device had not started it, and the "
                     "others as inside it: ",
                     s.ToString()));
  if (rank == 0) {
    std::printf("a late device, rank 0's error: %s\n", s.ToString().c_str());
  }
  ++matrix["a rank whose device is late: named float32"];
  (*g)->Abort();
  cuda.StreamSynchronize(stream);
  cuda.StreamDestroy(stream);
  CheckOk(world.Barrier(), "every rank past the late device");
}

// A tensor of `n` elements at element `at` of `t` (same device and dtype).
TensorRef Part(const GpuTensor& t, int64_t at, int64_t n) {
  const TensorRef whole = t.ref();
  return TensorRef(
      static_cast<char*>(whole.data()) + at * ElementSize(whole.dtype()), n,
      whole.dtype(), whole.device());
}

// Outputs inside their inputs (and inputs inside their outputs) on the
// device. Two sizes: one within the simulator's 64 KiB per-pair channel and
// one past it, where a peer's part lands while this rank's is still being
// sent.
void OverlappingOutputs(ProcessGroup& g) {
  const DataType dt = DataType::kInt32;
  auto of = [&](int r, int64_t i) { return Value(dt, ReduceOp::kSum, r, i); };
  for (int64_t n : {int64_t{37}, int64_t{1} << 15}) {
    const std::string at = absl::StrCat("int32 x", n);
    // all_to_all in place: rank r's part k (r's values at k * n + i) goes to
    // rank k, and part k of the same tensor receives rank k's part r.
    std::vector<double> send(n * size);
    for (int64_t i = 0; i < n * size; ++i) send[i] = of(rank, i);
    GpuTensor a2a(dt, send, device);
    absl::Status s = g.AllToAll(a2a.ref(), a2a.ref());
    Expect(s, "all_to_all_in_place " + at,
           Compare(a2a.Read(), dt,
                   [&](int64_t i) {
                     return of(static_cast<int>(i / n), rank * n + i % n);
                   }),
           dt);
    // reduce_scatter into part 0 of the input (every rank but rank 0: not
    // NCCL's form) and into this rank's own part (NCCL's form).
    for (bool own : {false, true}) {
      std::vector<double> whole(n * size);
      for (int64_t i = 0; i < n * size; ++i) whole[i] = of(rank, i);
      GpuTensor in(dt, whole, device);
      const TensorRef out = Part(in, own ? rank * n : 0, n);
      s = g.ReduceScatter(in.ref(), out, ReduceOp::kSum);
      std::vector<double> got = in.Read();
      got.erase(got.begin(), got.begin() + (own ? rank * n : 0));
      got.resize(n);
      Expect(s,
             absl::StrCat("reduce_scatter_overlapping ", own ? "own " : "", at),
             Compare(got, dt,
                     [&](int64_t i) {
                       double sum = 0;
                       for (int r = 0; r < size; ++r)
                         sum += of(r, rank * n + i);
                       return sum;
                     }),
             dt);
    }
    // all_gather and gather with the input at part 0 of the output (not the
    // in-place form but for rank 0; gather's root is the last rank), and
    // scatter with the root's output at part 0 of its input (not its own
    // part: the root is the last rank).
    const int root = size - 1;
    for (bool gather : {false, true}) {
      std::vector<double> all(n * size, 0);
      for (int64_t i = 0; i < n; ++i) all[i] = of(rank, i);
      GpuTensor out(dt, all, device);
      const TensorRef mine = Part(out, 0, n);
      s = gather ? g.Gather(mine, out.ref(), root)
                 : g.AllGather(mine, out.ref());
      Expect(
          s,
          absl::StrCat(gather ? "gather" : "all_gather", "_overlapping ", at),
          gather && rank != root
              ? ""
              : Compare(out.Read(), dt,
                        [&](int64_t i) { return of(i / n, i % n); }),
          dt);
    }
    GpuTensor source(dt, PartsOfEveryRank(dt, n), device);
    GpuTensor part(dt, std::vector<double>(n, 0), device);
    const TensorRef into = rank == root ? Part(source, 0, n) : part.ref();
    s = g.Scatter(source.ref(), into, root);
    std::vector<double> got = rank == root ? source.Read() : part.Read();
    got.resize(n);
    Expect(s, "scatter_overlapping " + at,
           Compare(got, dt, [&](int64_t i) { return of(rank, i); }), dt);
  }
}

// A stream of another device on one rank only (the last): its operation is
// refused there (INVALID_ARGUMENT naming the stream), and since its peers
// run theirs, the refusal aborts the group's communication, so that they
// fail promptly (UNAVAILABLE naming that rank), not at the timeout; the
// group is unusable after on that rank.
void ForeignStreamOnOneRank(ProcessGroup& world, const CudaLibrary& cuda) {
  const Device other = Device::Cuda((device.index + 1) % CudaDeviceCount());
  if (size == 1 || other == device) return;
  const int last = size - 1;
  absl::StatusOr<std::shared_ptr<ProcessGroup>> g = NcclGroupOfEveryone(
      world, absl::Seconds(30), "a group one rank gives a foreign stream");
  cudaStream_t foreign = nullptr;
  if (rank == last) {
    int previous = 0;
    cuda.GetDevice(&previous);
    cuda.SetDevice(other.index);
    RequireOk(
        CudaStatus(cuda,
                   cuda.StreamCreateWithFlags(&foreign, cudaStreamNonBlocking),
                   "cudaStreamCreateWithFlags"),
        "a stream on " + other.ToString());
    cuda.SetDevice(previous);
    RequireOk((*g)->SetCudaStream(foreign), "SetCudaStream(foreign)");
  }
  GpuTensor t(DataType::kFloat32, {1, 2}, device);
  const absl::Time start = absl::Now();
  absl::Status s = (*g)->AllReduce(t.ref(), ReduceOp::kSum);
  const absl::Duration took = absl::Now() - start;
  if (rank == last) {
    Check(s.code() == absl::StatusCode::kInvalidArgument &&
              absl::StrContains(s.message(), "stream"),
          "a stream of another device: INVALID_ARGUMENT naming the stream: " +
              s.ToString());
    RequireOk((*g)->SetCudaStream(nullptr), "SetCudaStream(nullptr)");
    cuda.StreamDestroy(foreign);
    s = (*g)->AllReduce(t.ref(), ReduceOp::kSum);
    Check(!s.ok(),
          "the group is unusable after the one-sided refusal: " + s.ToString());
  } else {
    Check(s.code() == absl::StatusCode::kUnavailable &&
              absl::StrContains(s.message(), absl::StrCat("rank(s) ", last,
                                                          " never joined it")),
          absl::StrCat("the peers of a rank that refused fail naming rank ",
                       last, ": ", s.ToString()));
    Check(took < absl::Seconds(10),
          absl::StrCat("soon after the refusal, not at the timeout: ",
                       absl::FormatDuration(took)));
  }
  ++matrix["a stream of another device on one rank"];
  CheckOk(world.Barrier(), "every rank past the one-sided refusal");
  (*g)->Abort();
}

// Bool sum and product, as torch's ProcessGroupNCCL maps them (ncclMax,
// ncclMin) and distkit's gloo computes them: OR and AND over the ranks, for
// all_reduce, reduce and reduce_scatter.
void BoolSumAndProduct(ProcessGroup& g) {
  const int64_t n = 23;
  // Rank r's bit at index i; every 5th index is true everywhere, so AND is
  // sometimes true too.
  auto bit = [](int r, int64_t i) {
    return (i % 5 == 0 || (i + r) % 3 == 0) ? 1.0 : 0.0;
  };
  auto reduced = [&](ReduceOp op, int64_t i) {
    bool any = false, all = true;
    for (int r = 0; r < size; ++r) {
      any = any || bit(r, i) != 0;
      all = all && bit(r, i) != 0;
    }
    return (op == ReduceOp::kSum ? any : all) ? 1.0 : 0.0;
  };
  const DataType dt = DataType::kBool;
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProduct}) {
    const std::string name(ReduceOpName(op));
    std::vector<double> mine(n * size);
    for (int64_t i = 0; i < n * size; ++i) mine[i] = bit(rank, i);
    GpuTensor a(dt, std::vector<double>(mine.begin(), mine.begin() + n),
                device);
    // Each status first: the result is read only after the call.
    absl::Status s = g.AllReduce(a.ref(), op);
    Expect(s, "all_reduce " + name + " (bool)",
           Compare(a.Read(), dt, [&](int64_t i) { return reduced(op, i); }),
           dt);
    const int root = size - 1;
    GpuTensor r(dt, std::vector<double>(mine.begin(), mine.begin() + n),
                device);
    s = g.Reduce(r.ref(), op, root);
    Expect(s, "reduce " + name + " (bool)",
           rank != root ? ""
                        : Compare(r.Read(), dt,
                                  [&](int64_t i) { return reduced(op, i); }),
           dt);
    GpuTensor in(dt, mine, device);
    GpuTensor out(dt, std::vector<double>(n, 0), device);
    s = g.ReduceScatter(in.ref(), out.ref(), op);
    Expect(s, "reduce_scatter " + name + " (bool)",
           Compare(out.Read(), dt,
                   [&](int64_t i) { return reduced(op, rank * n + i); }),
           dt);
  }
}

// A channel half made (its stream created, then an event creation failed)
// is destroyed, not dropped: the simulator fails the next event creation on
// every rank while a subgroup is made (of a parent of its own: the failure
// spoils the parent), and no stream is left behind.
void HalfMadeChannelIsDestroyed(ProcessGroup& world) {
  auto fail =
      reinterpret_cast<void (*)(long)>(SimSymbol("dksimFailEventCreate"));
  auto streams = reinterpret_cast<long (*)()>(SimSymbol("dksimLiveStreams"));
  std::vector<int> everyone;
  for (int r = 0; r < size; ++r) everyone.push_back(r);
  absl::StatusOr<std::shared_ptr<ProcessGroup>> parent = NcclGroupOfEveryone(
      world, absl::Seconds(20), "a parent for the failing creation");
  GpuTensor t(DataType::kFloat32, {1.0 * rank}, device);
  CheckOk((*parent)->AllReduce(t.ref(), ReduceOp::kSum), "parent warm-up");
  CheckOk(world.Barrier(), "every rank before the failing creation");
  const long before = streams();
  fail(0);
  absl::StatusOr<std::shared_ptr<ProcessGroup>> g =
      (*parent)->NewGroup(everyone);
  fail(-1);
  ++matrix["a failed cudaEventCreate while making a group"];
  Check(!g.ok() &&
            absl::StrContains(g.status().message(), "cudaEventCreateWithFlags"),
        "the group's creation fails naming cudaEventCreateWithFlags: " +
            g.status().ToString());
  g = absl::StatusOr<std::shared_ptr<ProcessGroup>>();  // gone, if made
  Check(streams() == before,
        absl::StrCat("streams created and not destroyed: ", before, " before, ",
                     streams(), " after"));
  CheckOk(world.Barrier(), "every rank past the failing creation");
  (*parent)->Abort();
}

// Destroying one group does not wait for another group's operation in
// flight: rank 0's all_reduce on W needs rank 1, which first waits (on a
// CPU group) for rank 0 to have destroyed G. cudaFreeHost, which waits for
// all of the device's work, would hold rank 0's destroy until W's timeout.
void DestroyIsNotHeldByAnotherGroup(ProcessGroup& world) {
  if (size == 1) return;
  std::vector<int> everyone;
  for (int r = 0; r < size; ++r) everyone.push_back(r);
  GroupOptions cpu_options;
  cpu_options.backend = "gloo";
  cpu_options.timeout = absl::Seconds(60);
  absl::StatusOr<std::shared_ptr<ProcessGroup>> cpu =
      world.NewGroup(everyone, cpu_options);
  RequireOk(cpu.status(), "a CPU group");
  absl::StatusOr<std::shared_ptr<ProcessGroup>> w =
      NcclGroupOfEveryone(world, absl::Seconds(15), "group W");
  absl::StatusOr<std::shared_ptr<ProcessGroup>> g =
      NcclGroupOfEveryone(world, absl::Seconds(15), "group G");
  // G has run an operation, so it has its signatures' memory in use.
  GpuTensor warm(DataType::kFloat32, {1.0 * rank}, device);
  CheckOk((*g)->AllReduce(warm.ref(), ReduceOp::kSum), "G's all_reduce");
  GpuTensor t(DataType::kFloat32, {1.0 * rank, 2}, device);
  std::shared_ptr<Work> pending;
  if (rank == 0) pending = (*w)->AllReduceAsync(t.ref(), ReduceOp::kSum);
  if (rank == 0) absl::SleepFor(absl::Milliseconds(100));  // W's op queued
  const absl::Time start = absl::Now();
  g = absl::StatusOr<std::shared_ptr<ProcessGroup>>();  // destroys G
  const absl::Duration took = absl::Now() - start;
  Check(took < absl::Seconds(5),
        absl::StrCat("destroying G while W's all_reduce waits for a peer "
                     "returns at once, not at W's timeout: ",
                     absl::FormatDuration(took)));
  CheckOk((*cpu)->Barrier(), "the CPU group's barrier");
  if (rank != 0) pending = (*w)->AllReduceAsync(t.ref(), ReduceOp::kSum);
  CheckOk(pending->Wait(absl::Seconds(30)), "W's all_reduce");
  Check(t.Read() == std::vector<double>({size * (size - 1) / 2.0, 2.0 * size}),
        "W's sum");
  ++matrix["destroy beside another group's op in flight"];
}

// Which devices this process made a CUDA context on, as the simulator
// recorded them (dksimContextMask).
void OnlyItsOwnDevice(ProcessGroup& world) {
  auto mask = reinterpret_cast<unsigned (*)()>(SimSymbol("dksimContextMask"));
  // A thread of the caller's that never chose a device (it is on 0) copies,
  // allocates and issues an operation: distkit switches it to the group's
  // device and must not switch it back to 0, which would make a context
  // there.
  std::thread fresh([&] {
    GpuTensor t(DataType::kFloat32, {1.0 * rank, 2}, device);
    Check(t.ok(), "a fresh thread uploads to " + device.ToString());
    std::shared_ptr<Work> w = world.AllReduceAsync(t.ref(), ReduceOp::kSum);
    CheckOk(w->Wait(absl::Seconds(60)), "an all_reduce from a fresh thread");
    Check(t.Read()[1] == 2.0 * size, "its result");
  });
  fresh.join();
  Check(mask() == (1u << device.index),
        absl::StrCat("contexts only on ", device.ToString(),
                     ": the simulator's mask is ", mask()));
}

}  // namespace
}  // namespace distkit

int main() {
  using namespace distkit;
  testing::Require(testing::JoinDistJob("nccl"), "init_dist on nccl");
  std::shared_ptr<ProcessGroup> world = dist::GetDefaultGroup();
  rank = world->rank();
  size = world->size();
  testing::SetCheckRank(rank);
  device = world->comm_device();
  testing::Require(device.is_cuda(), "the comm device is a CUDA device");
  absl::StatusOr<const CudaLibrary*> cuda = LoadCudaLibrary();
  testing::RequireOk(cuda.status(), "libcudart (the simulator)");

  Matrix(*world);
  BoolSumAndProduct(*world);
  HalfMadeChannelIsDestroyed(*world);
  DestroyIsNotHeldByAnotherGroup(*world);
  PointToPointBesideCollectives(*world);
  OverlappingOutputs(*world);
  NoAllocationPerOp(*world);
  MeanAndZeroOnTheDevice(*world, **cuda);
  FollowsTheCallersStream(*world, **cuda);
  Groups(*world);
  // Before Misuse, which makes a stream on another device on purpose.
  OnlyItsOwnDevice(*world);
  Misuse(*world, **cuda);
  FailedRecordIsAnError(*world);
  ForeignStreamOnOneRank(*world, **cuda);
  TimeoutEndsTheOperation(*world);
  LateDeviceIsNamed(*world, **cuda);
  AbortOnOneRank(*world);
  SubgroupAfterAOneSidedAbort(*world);
  DisagreementAbortsTheGroup(*world);
  BarrierAgainstAllReduce(*world);
  AbortEndsAnOperationInFlight(*world);
  if (rank == 0) {
    for (const auto& [what, n] : matrix) {
      std::printf("matrix: %-48s world size %d: %d checks\n", what.c_str(),
                  size, n);
    }
  }
  dist::DestroyDist();
  return testing::FinishChecks(
      absl::StrCat("the NCCL backend on the simulator, ", device.ToString()));
}
