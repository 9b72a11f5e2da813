// gpu_check: distkit's NCCL path checked by value against computed results
// and against raw NCCL calls made in the same program, on real GPUs or on the
// simulator (testing/gpu_sim). Built without Bazel by tools/gpu_check.sh.
//
// CUDA and NCCL are reached only through the library variables distkit
// itself uses (cuda_library.h, nccl_library.h: DISTKIT_CUDART_LIBRARY and
// DISTKIT_NCCL_LIBRARY, else their search): nothing here links libcudart or
// libnccl, so the reference side and distkit call the same NCCL and the same
// program runs unchanged against the simulator.
//
// The parent counts the devices, hosts a job's store (StoreServer) and runs
// this program again for each rank (--rank): a job at world size 1 on cuda:0
// always, and one at world size min(devices, 4), a device each, when there
// are at least two. Each rank, over a ProcessGroup on "nccl" beside a raw
// communicator of its own:
//   1. every operation x dtype (x reduction) with values that depend on rank
//      and index, against computed values and raw NCCL's result on the same
//      inputs (ncclAllReduce / Broadcast / Reduce / AllGather /
//      ReduceScatter, grouped ncclSend / ncclRecv for gather, scatter and
//      all_to_all); what NCCL cannot express is refused;
//   2. sends and receives (a ring, and beside a collective in an order that
//      differs between odd and even ranks);
//   3. subgroups (ncclCommSplit): the even ranks, and every rank in reverse
//      order (so group ranks differ from world ranks);
//   4. host <-> device copies, and the GradReducer with CUDA parameters
//      (buckets on the device, the mean across ranks, the fp16 hook);
//   5. on the simulator: contexts and allocations on the rank's own device
//      only;
//   6. rank 0: a 4-byte all_reduce's latency and an all_reduce bandwidth
//      table, distkit beside raw NCCL, each size's values compared.
// Every check prints one PASS / FAIL line; the parent prefixes each with the
// job and rank, fails a rank that crashes or outlives the job's deadline
// (GPU_CHECK_TIMEOUT_S; it kills it), and ends with a count. Exit 0 when
// everything passed, 1 on any failure, 77 when nothing could run (no GPU).
// GPU_CHECK_QUICK=1: a short bandwidth table (up to 1 MiB; the simulator
// copies every byte); GPU_CHECK_MAX_BYTES overrides its largest size.
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <nccl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cc/comm/backend_registry.h"
#include "cc/comm/nccl/nccl_backend.h"
#include "cc/comm/nccl/nccl_library.h"
#include "cc/comm/op_signature.h"
#include "cc/core/cuda_library.h"
#include "cc/core/device_copy.h"
#include "cc/core/status.h"
#include "cc/group/process_group.h"
#include "cc/parallel/grad_reducer.h"
#include "cc/store/store_server.h"
#include "cc/store/tcp_store.h"
#include "testing/cc/gpu_tensor.h"
#include "testing/cc/typed_values.h"

namespace distkit {
namespace {

// The exit status of a run that checked nothing (automake's "skipped").
constexpr int kSkipped = 77;
// Each distkit operation's and each raw NCCL call's own bound.
constexpr absl::Duration kOpTimeout = absl::Seconds(60);

// One rank's checks.

int passes = 0, failures = 0;
int rank = 0, size = 1;
Device device;

void Check(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "PASS" : "FAIL", what.c_str());
  ++(ok ? passes : failures);
}

// Cases of one operation, folded into one line: how many ran, how many went
// wrong, and the first few of those.
struct Tally {
  int cases = 0;
  int failed = 0;
  std::vector<std::string> wrong;
  void Add(const std::string& what, const std::string& error) {
    ++cases;
    if (error.empty()) return;
    ++failed;
    if (wrong.size() < 4) wrong.push_back(what + ": " + error);
  }
  void Report(const std::string& what) const {
    if (failed == 0) {
      Check(cases > 0, absl::StrCat(what, " (", cases, " cases)"));
    } else {
      Check(false, absl::StrCat(what, ": ", failed, " of ", cases,
                                " cases wrong: ", absl::StrJoin(wrong, "; ")));
    }
  }
};

const DataType kDtypes[] = {
    DataType::kFloat32,  DataType::kFloat64, DataType::kFloat16,
    DataType::kBFloat16, DataType::kInt32,   DataType::kInt64,
    DataType::kInt8,     DataType::kUInt8,   DataType::kBool};
const int64_t kSizes[] = {1, 1031};

std::vector<ReduceOp> Reductions(DataType dt) {
  if (dt == DataType::kBool) {
    return {ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kBand, ReduceOp::kBor};
  }
  return {ReduceOp::kSum, ReduceOp::kProduct, ReduceOp::kMin, ReduceOp::kMax,
          ReduceOp::kMean};
}

// Rank r's element i: small integers, so every reduction is exact in every
// dtype at world size <= 4 (products of 2, 1 and -1; sums within int8).
double Value(DataType dt, ReduceOp op, int r, int64_t i) {
  if (dt == DataType::kBool) return (r + i) % 3 == 0 ? 1 : 0;
  if (op == ReduceOp::kProduct) {
    const int64_t k = (2 * r + i) % 3;
    if (k == 0) return 2;
    return k == 1 || dt == DataType::kUInt8 ? 1 : -1;
  }
  const int64_t v = (5 * r + 3 * i) % 13;
  return dt == DataType::kUInt8 ? v : v - 6;
}

std::vector<double> Values(DataType dt, ReduceOp op, int r, int64_t n,
                           int64_t first = 0) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = Value(dt, op, r, first + i);
  return v;
}

// `op` over every rank's element i, as distkit defines it: an integer mean
// truncates, a floating one divides once.
double Reduced(DataType dt, ReduceOp op, int64_t i, int n) {
  const double r = testing::ReduceOverRanks(
      dt, op, n, [&](int k) { return Value(dt, op, k, i); });
  if (op != ReduceOp::kMean || dt == DataType::kBool) return r;
  if (!IsFloatingPoint(dt)) return std::trunc(r / n);
  return r / n;
}

// Integers exactly; floats within what NCCL's float mean may round (it can
// scale each input by 1 / size before the sum, so a mean of 0 can come out
// as 1e-7), measured against the inputs' scale (|values| <= 6; sums <= 24).
// A swapped operation or a missing mean is off by 0.5 or more.
bool Close(double got, double want, DataType dt) {
  double rel = 0;
  if (dt == DataType::kFloat16) rel = 2e-3;
  if (dt == DataType::kBFloat16) rel = 1.6e-2;
  if (dt == DataType::kFloat32) rel = 1e-6;
  if (dt == DataType::kFloat64) rel = 1e-12;
  return std::abs(got - want) <= rel * (std::abs(want) + 8);
}

// "" when got[i] is close to want(i) for every i; else the first miss.
std::string Miss(const std::vector<double>& got, DataType dt,
                 const std::function<double(int64_t)>& want) {
  for (size_t i = 0; i < got.size(); ++i) {
    const double w = want(static_cast<int64_t>(i));
    if (!Close(got[i], w, dt)) {
      return absl::StrCat("[", i, "] = ", got[i], ", want ", w);
    }
  }
  return "";
}

// "" when distkit's and raw NCCL's results are the same values (floats
// within Close: the two communicators may pick different algorithms).
std::string Differs(const std::vector<double>& distkit,
                    const std::vector<double>& raw, DataType dt) {
  if (distkit.size() != raw.size()) return "sizes differ";
  for (size_t i = 0; i < raw.size(); ++i) {
    if (!Close(distkit[i], raw[i], dt)) {
      return absl::StrCat("[", i, "] = ", distkit[i], ", raw NCCL gave ",
                          raw[i]);
    }
  }
  return "";
}

std::string Either(const absl::Status& s, const std::string& a,
                   const std::string& b = "") {
  if (!s.ok()) return s.ToString();
  if (!a.empty()) return a;
  if (!b.empty()) return "against raw NCCL: " + b;
  return "";
}

ncclDataType_t RawType(DataType d) {
  switch (d) {
    case DataType::kFloat16:
      return ncclHalf;
    case DataType::kBFloat16:
      return ncclBfloat16;
    case DataType::kFloat32:
      return ncclFloat;
    case DataType::kFloat64:
      return ncclDouble;
    case DataType::kInt8:
      return ncclInt8;
    case DataType::kInt32:
      return ncclInt32;
    case DataType::kInt64:
      return ncclInt64;
    case DataType::kUInt8:
    case DataType::kBool:
      return ncclUint8;
  }
  return ncclUint8;
}

// The reference for `op`: an integer mean is a sum here, divided on the host.
ncclRedOp_t RawOp(ReduceOp op, DataType d) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kProduct:
      return ncclProd;
    case ReduceOp::kMin:
    case ReduceOp::kBand:
      return ncclMin;
    case ReduceOp::kMax:
    case ReduceOp::kBor:
      return ncclMax;
    case ReduceOp::kMean:
      return IsFloatingPoint(d) ? ncclAvg : ncclSum;
    case ReduceOp::kBxor:
      break;
  }
  return ncclSum;
}

std::vector<double> HostMean(std::vector<double> v, ReduceOp op, DataType d) {
  if (op == ReduceOp::kMean && !IsFloatingPoint(d)) {
    for (double& x : v) x = std::trunc(x / size);
  }
  return v;
}

// A communicator of this program's own on the rank's device, made with
// ncclCommInitRank from an id rank 0 puts in the job's store: the reference
// every distkit result is compared with.
class RawNccl {
 public:
  RawNccl(const CudaLibrary& cuda, const NcclLibrary& nccl)
      : cuda_(cuda), nccl_(nccl) {}
  ~RawNccl() {
    if (comm_ != nullptr) nccl_.CommDestroy(comm_);
    if (done_ != nullptr) cuda_.EventDestroy(done_);
    if (stream_ != nullptr) cuda_.StreamDestroy(stream_);
  }

  absl::Status Init(Store& store) {
    ncclUniqueId id;
    if (rank == 0) {
      if (ncclResult_t r = nccl_.GetUniqueId(&id); r != ncclSuccess) {
        return Error("ncclGetUniqueId", r);
      }
      DK_RETURN_IF_ERROR(store.Set(
          "gpu_check/raw_id",
          std::string(reinterpret_cast<const char*>(&id), sizeof(id))));
    } else {
      DK_ASSIGN_OR_RETURN(std::string bytes,
                          store.Get("gpu_check/raw_id", kOpTimeout));
      if (bytes.size() != sizeof(id)) {
        return absl::InternalError("a malformed ncclUniqueId in the store");
      }
      std::memcpy(&id, bytes.data(), sizeof(id));
    }
    // A blocking stream: it waits for the legacy stream's earlier work,
    // where the inputs were uploaded (a pageable cudaMemcpy returns before
    // the device has the bytes).
    DK_RETURN_IF_ERROR(CudaStatus(
        cuda_, cuda_.StreamCreateWithFlags(&stream_, cudaStreamDefault),
        "cudaStreamCreateWithFlags"));
    DK_RETURN_IF_ERROR(CudaStatus(
        cuda_, cuda_.EventCreateWithFlags(&done_, cudaEventDisableTiming),
        "cudaEventCreateWithFlags"));
    if (ncclResult_t r = nccl_.CommInitRank(&comm_, size, id, rank);
        r != ncclSuccess) {
      comm_ = nullptr;
      return Error("ncclCommInitRank", r);
    }
    return absl::OkStatus();
  }

  // Enqueues `calls` on the raw stream (inside ncclGroupStart / End when
  // `grouped`: sends and receives that must progress together) and waits for
  // them, up to kOpTimeout (then the communicator is aborted).
  absl::Status Run(
      const std::function<ncclResult_t(ncclComm_t, cudaStream_t)>& calls,
      bool grouped = false) {
    if (comm_ == nullptr) {
      return absl::FailedPreconditionError("raw NCCL was aborted");
    }
    if (grouped) nccl_.GroupStart();
    const ncclResult_t enqueued = calls(comm_, stream_);
    const ncclResult_t ended = grouped ? nccl_.GroupEnd() : ncclSuccess;
    if (enqueued != ncclSuccess) return Error("enqueue", enqueued);
    if (ended != ncclSuccess) return Error("ncclGroupEnd", ended);
    DK_RETURN_IF_ERROR(CudaStatus(cuda_, cuda_.EventRecord(done_, stream_),
                                  "cudaEventRecord"));
    const absl::Time start = absl::Now();
    const absl::Time deadline = start + kOpTimeout;
    while (true) {
      const cudaError_t q = cuda_.EventQuery(done_);
      if (q == cudaSuccess) return absl::OkStatus();
      if (q != cudaErrorNotReady) return CudaStatus(cuda_, q, "cudaEventQuery");
      ncclResult_t async = ncclSuccess;
      nccl_.CommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        Abort();
        return Error("raw NCCL's asynchronous error", async);
      }
      if (absl::Now() > deadline) {
        Abort();
        return absl::DeadlineExceededError(
            absl::StrCat("raw NCCL call still running after ",
                         absl::FormatDuration(kOpTimeout)));
      }
      // Spins for the first 200 us, so that short calls are timed by the
      // device, not by a sleep's granularity.
      if (absl::Now() - start > absl::Microseconds(200)) {
        absl::SleepFor(absl::Microseconds(20));
      }
    }
  }

 private:
  // What is queued fails and completes; later calls are refused.
  void Abort() {
    nccl_.CommAbort(comm_);
    comm_ = nullptr;
  }
  absl::Status Error(const char* what, ncclResult_t r) const {
    return absl::InternalError(
        absl::StrCat(what, ": ", nccl_.GetErrorString(r)));
  }

  const CudaLibrary& cuda_;
  const NcclLibrary& nccl_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t done_ = nullptr;
};

using Gpu = GpuTensor;

// Section 1: every operation x dtype (x reduction), distkit against the
// computed values and raw NCCL on the same inputs.
void Matrix(ProcessGroup& g, const NcclLibrary& nccl, RawNccl& raw) {
  std::map<std::string, Tally> t;
  std::map<std::string, std::vector<std::string>> types;
  const int last = size - 1;
  for (DataType dt : kDtypes) {
    const std::string type(DataTypeName(dt));
    const ncclDataType_t rt = RawType(dt);
    const size_t es = ElementSize(dt);
    for (int64_t n : kSizes) {
      const std::string at = absl::StrCat(type, " x", n);
      for (ReduceOp op : Reductions(dt)) {
        const std::string c = absl::StrCat(ReduceOpName(op), " ", at);
        auto want = [&](int64_t i) { return Reduced(dt, op, i, size); };
        const ncclRedOp_t ro = RawOp(op, dt);
        // all_reduce
        Gpu a(dt, Values(dt, op, rank, n), device);
        Gpu ar(dt, Values(dt, op, rank, n), device);
        absl::Status s = g.AllReduce(a.ref(), op);
        absl::Status rs = raw.Run([&](ncclComm_t comm, cudaStream_t st) {
          return nccl.AllReduce(ar.ref().data(), ar.ref().data(), n, rt, ro,
                                comm, st);
        });
        t["all_reduce"].Add(
            c, Either(s.ok() ? rs : s, Miss(a.Read(), dt, want),
                      Differs(a.Read(), HostMean(ar.Read(), op, dt), dt)));
        // reduce to the last rank
        Gpu r(dt, Values(dt, op, rank, n), device);
        Gpu rr(dt, Values(dt, op, rank, n), device);
        s = g.Reduce(r.ref(), op, last);
        rs = raw.Run([&](ncclComm_t comm, cudaStream_t st) {
          return nccl.Reduce(rr.ref().data(), rr.ref().data(), n, rt, ro, last,
                             comm, st);
        });
        t["reduce"].Add(
            c, Either(s.ok() ? rs : s,
                      rank == last ? Miss(r.Read(), dt, want) : "",
                      rank == last
                          ? Differs(r.Read(), HostMean(rr.Read(), op, dt), dt)
                          : ""));
        // reduce_scatter: part k of every rank's input reduced lands on k.
        Gpu in(dt, Values(dt, op, rank, n * size), device);
        Gpu out(dt, std::vector<double>(n, 0), device);
        Gpu rout(dt, std::vector<double>(n, 0), device);
        s = g.ReduceScatter(in.ref(), out.ref(), op);
        rs = raw.Run([&](ncclComm_t comm, cudaStream_t st) {
          return nccl.ReduceScatter(in.ref().data(), rout.ref().data(), n, rt,
                                    ro, comm, st);
        });
        t["reduce_scatter"].Add(
            c, Either(s.ok() ? rs : s,
                      Miss(out.Read(), dt,
                           [&](int64_t i) {
                             return Reduced(dt, op, rank * n + i, size);
                           }),
                      Differs(out.Read(), HostMean(rout.Read(), op, dt), dt)));
      }
      const ReduceOp plain = ReduceOp::kSum;
      auto of = [&](int r, int64_t i) { return Value(dt, plain, r, i); };
      const std::vector<double> mine = Values(dt, plain, rank, n);
      // broadcast from the last rank
      Gpu b(dt, mine, device), br(dt, mine, device);
      absl::Status s = g.Broadcast(b.ref(), last);
      absl::Status rs = raw.Run([&](ncclComm_t comm, cudaStream_t st) {
        return nccl.Broadcast(br.ref().data(), br.ref().data(), n, rt, last,
                              comm, st);
      });
      t["broadcast"].Add(
          at, Either(s.ok() ? rs : s,
                     Miss(b.Read(), dt, [&](int64_t i) { return of(last, i); }),
                     Differs(b.Read(), br.Read(), dt)));
      // all_gather
      Gpu x(dt, mine, device);
      Gpu all(dt, std::vector<double>(n * size, 0), device);
      Gpu rall(dt, std::vector<double>(n * size, 0), device);
      s = g.AllGather(x.ref(), all.ref());
      rs = raw.Run([&](ncclComm_t comm, cudaStream_t st) {
        return nccl.AllGather(x.ref().data(), rall.ref().data(), n, rt, comm,
                              st);
      });
      auto gathered = [&](int64_t i) { return of(i / n, i % n); };
      t["all_gather"].Add(
          at, Either(s.ok() ? rs : s, Miss(all.Read(), dt, gathered),
                     Differs(all.Read(), rall.Read(), dt)));
      // gather to rank 0: raw NCCL's is grouped sends and receives, its own
      // part received from itself.
      Gpu gout(dt, std::vector<double>(n * size, 0), device);
      Gpu rgout(dt, std::vector<double>(n * size, 0), device);
      s = g.Gather(x.ref(), gout.ref(), 0);
      rs = raw.Run(
          [&](ncclComm_t comm, cudaStream_t st) {
            ncclResult_t res = nccl.Send(x.ref().data(), n, rt, 0, comm, st);
            for (int k = 0; rank == 0 && k < size && res == ncclSuccess; ++k) {
              res =
                  nccl.Recv(static_cast<char*>(rgout.ref().data()) + k * n * es,
                            n, rt, k, comm, st);
            }
            return res;
          },
          /*grouped=*/true);
      t["gather"].Add(
          at, Either(s.ok() ? rs : s,
                     rank == 0 ? Miss(gout.Read(), dt, gathered) : "",
                     rank == 0 ? Differs(gout.Read(), rgout.Read(), dt) : ""));
      // scatter from the last rank: its part k is "rank k"'s values.
      std::vector<double> parts(n * size);
      for (int64_t i = 0; i < n * size; ++i) parts[i] = of(i / n, i % n);
      Gpu source(dt, parts, device);
      Gpu part(dt, std::vector<double>(n, 0), device);
      Gpu rpart(dt, std::vector<double>(n, 0), device);
      s = g.Scatter(source.ref(), part.ref(), last);
      rs = raw.Run(
          [&](ncclComm_t comm, cudaStream_t st) {
            ncclResult_t res = ncclSuccess;
            for (int k = 0; rank == last && k < size && res == ncclSuccess;
                 ++k) {
              res = nccl.Send(
                  static_cast<char*>(source.ref().data()) + k * n * es, n, rt,
                  k, comm, st);
            }
            if (res != ncclSuccess) return res;
            return nccl.Recv(rpart.ref().data(), n, rt, last, comm, st);
          },
          /*grouped=*/true);
      t["scatter"].Add(at, Either(s.ok() ? rs : s,
                                  Miss(part.Read(), dt,
                                       [&](int64_t i) { return of(rank, i); }),
                                  Differs(part.Read(), rpart.Read(), dt)));
      // all_to_all: rank r's part k (its values at k * n + i) goes to k.
      Gpu send(dt, Values(dt, plain, rank, n * size), device);
      Gpu recv(dt, std::vector<double>(n * size, 0), device);
      Gpu rrecv(dt, std::vector<double>(n * size, 0), device);
      s = g.AllToAll(send.ref(), recv.ref());
      rs = raw.Run(
          [&](ncclComm_t comm, cudaStream_t st) {
            ncclResult_t res = ncclSuccess;
            for (int k = 0; k < size && res == ncclSuccess; ++k) {
              res =
                  nccl.Send(static_cast<char*>(send.ref().data()) + k * n * es,
                            n, rt, k, comm, st);
              if (res == ncclSuccess) {
                res = nccl.Recv(
                    static_cast<char*>(rrecv.ref().data()) + k * n * es, n, rt,
                    k, comm, st);
              }
            }
            return res;
          },
          /*grouped=*/true);
      t["all_to_all"].Add(at, Either(s.ok() ? rs : s,
                                     Miss(recv.Read(), dt,
                                          [&](int64_t i) {
                                            return of(static_cast<int>(i / n),
                                                      rank * n + i % n);
                                          }),
                                     Differs(recv.Read(), rrecv.Read(), dt)));
    }
    for (const auto& [name, _] : t) types[name].push_back(type);
  }
  const char* refs[][2] = {{"all_reduce", "ncclAllReduce"},
                           {"reduce", "ncclReduce"},
                           {"reduce_scatter", "ncclReduceScatter"},
                           {"broadcast", "ncclBroadcast"},
                           {"all_gather", "ncclAllGather"},
                           {"gather", "grouped ncclSend/ncclRecv"},
                           {"scatter", "grouped ncclSend/ncclRecv"},
                           {"all_to_all", "grouped ncclSend/ncclRecv"}};
  for (const auto& [name, ref] : refs) {
    const auto& dts = types[name];
    t[name].Report(absl::StrCat(name, " over ", dts.size(), " dtypes (",
                                absl::StrJoin(dts, " "),
                                ") = computed values = raw ", ref));
  }

  // all_to_all with uneven splits: rank `from` sends Split(from, to)
  // elements to `to`, element j being Value(from, to * 100 + j).
  auto split = [](int from, int to) { return 1 + (from + 2 * to) % 3; };
  Tally uneven;
  for (DataType dt : {DataType::kFloat32, DataType::kInt8}) {
    const ncclDataType_t rt = RawType(dt);
    const size_t es = ElementSize(dt);
    std::vector<int64_t> in_splits(size), out_splits(size);
    std::vector<double> in_values, want;
    for (int k = 0; k < size; ++k) {
      in_splits[k] = split(rank, k);
      out_splits[k] = split(k, rank);
      for (int j = 0; j < in_splits[k]; ++j) {
        in_values.push_back(Value(dt, ReduceOp::kSum, rank, k * 100 + j));
      }
      for (int j = 0; j < out_splits[k]; ++j) {
        want.push_back(Value(dt, ReduceOp::kSum, k, rank * 100 + j));
      }
    }
    Gpu in(dt, in_values, device);
    Gpu out(dt, std::vector<double>(want.size(), 0), device);
    Gpu rout(dt, std::vector<double>(want.size(), 0), device);
    absl::Status s = g.AllToAll(in.ref(), out.ref(), in_splits, out_splits);
    absl::Status rs = raw.Run(
        [&](ncclComm_t comm, cudaStream_t st) {
          int64_t sent = 0, got = 0;
          ncclResult_t res = ncclSuccess;
          for (int k = 0; k < size && res == ncclSuccess; ++k) {
            res = nccl.Send(static_cast<char*>(in.ref().data()) + sent * es,
                            in_splits[k], rt, k, comm, st);
            if (res == ncclSuccess) {
              res = nccl.Recv(static_cast<char*>(rout.ref().data()) + got * es,
                              out_splits[k], rt, k, comm, st);
            }
            sent += in_splits[k];
            got += out_splits[k];
          }
          return res;
        },
        /*grouped=*/true);
    uneven.Add(std::string(DataTypeName(dt)),
               Either(s.ok() ? rs : s,
                      Miss(out.Read(), dt, [&](int64_t i) { return want[i]; }),
                      Differs(out.Read(), rout.Read(), dt)));
  }
  uneven.Report(
      "all_to_all with uneven splits (float32 int8) = computed values = raw "
      "grouped ncclSend/ncclRecv");

  // What NCCL cannot express is refused before anything runs.
  Gpu y(DataType::kInt32, {1, 2, 3}, device);
  absl::Status st = g.AllReduce(y.ref(), ReduceOp::kBxor);
  Check(st.code() == absl::StatusCode::kInvalidArgument,
        "bxor on int32 is refused: " + st.ToString());
  Gpu f(DataType::kFloat32, {1, 2, 3}, device);
  st = g.AllReduce(f.ref(), ReduceOp::kBand);
  Check(st.code() == absl::StatusCode::kInvalidArgument,
        "band on float32 is refused: " + st.ToString());
  std::vector<float> host = {1, 2};
  st = g.AllReduce(TensorRef(host.data(), 2, DataType::kFloat32),
                   ReduceOp::kSum);
  Check(!st.ok() && host[0] == 1,
        "a host tensor is refused by the nccl group: " + st.ToString());
  Check(g.Barrier().ok(), "barrier");
}

// Section 2: a ring of sends and receives, then sends and receives beside an
// all_reduce, issued in a different order on odd and even ranks.
void PointToPoint(ProcessGroup& g) {
  if (size == 1) return;
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  Tally ring;
  for (DataType dt : {DataType::kFloat32, DataType::kInt64, DataType::kBFloat16,
                      DataType::kUInt8}) {
    Gpu out(dt, Values(dt, ReduceOp::kSum, rank * 3, 53), device);
    Gpu in(dt, std::vector<double>(53, 0), device);
    auto sent = g.SendAsync(out.ref(), next, 7);
    auto got = g.RecvAsync(in.ref(), prev, 7);
    absl::Status s = sent->Wait(kOpTimeout);
    if (s.ok()) s = got->Wait(kOpTimeout);
    ring.Add(std::string(DataTypeName(dt)),
             Either(s, Miss(in.Read(), dt, [&](int64_t i) {
                      return Value(dt, ReduceOp::kSum, prev * 3, i);
                    })));
  }
  ring.Report(absl::StrCat("send to rank ", next, " / recv from rank ", prev,
                           " (float32 int64 bfloat16 uint8): the values rank ",
                           prev, " sent"));
  Tally beside;
  const DataType dt = DataType::kFloat32;
  for (int round = 0; round < 4; ++round) {
    Gpu sum(dt, Values(dt, ReduceOp::kSum, rank + round, 41), device);
    Gpu out(dt, Values(dt, ReduceOp::kSum, rank * 7 + round, 29), device);
    Gpu in(dt, std::vector<double>(29, 0), device);
    std::vector<std::shared_ptr<Work>> works;
    if (rank % 2 == 0) {
      works.push_back(g.AllReduceAsync(sum.ref(), ReduceOp::kSum));
      works.push_back(g.SendAsync(out.ref(), next, 0));
      works.push_back(g.RecvAsync(in.ref(), prev, 0));
    } else {
      works.push_back(g.RecvAsync(in.ref(), prev, 0));
      works.push_back(g.SendAsync(out.ref(), next, 0));
      works.push_back(g.AllReduceAsync(sum.ref(), ReduceOp::kSum));
    }
    absl::Status s;
    for (auto& w : works) {
      absl::Status ws = w->Wait(kOpTimeout);
      if (s.ok()) s = ws;
    }
    const std::string miss =
        Miss(in.Read(), dt,
             [&](int64_t i) {
               return Value(dt, ReduceOp::kSum, prev * 7 + round, i);
             }) +
        Miss(sum.Read(), dt, [&](int64_t i) {
          double total = 0;
          for (int r = 0; r < size; ++r) {
            total += Value(dt, ReduceOp::kSum, r + round, i);
          }
          return total;
        });
    beside.Add(absl::StrCat("round ", round), Either(s, miss));
  }
  beside.Report(
      "send / recv beside an all_reduce, issued in another order on odd "
      "ranks: both right");
}

// Section 3: subgroups split from the world's communicator.
void Subgroups(ProcessGroup& world) {
  std::vector<int> evens;
  for (int r = 0; r < size; r += 2) evens.push_back(r);
  auto sub = world.NewGroup(evens);
  Check(sub.ok(),
        "NewGroup(even ranks) (ncclCommSplit): " + sub.status().ToString());
  if (sub.ok() && rank % 2 == 0) {
    const DataType dt = DataType::kInt64;
    Gpu t(dt, Values(dt, ReduceOp::kMax, rank, 19), device);
    absl::Status s = (*sub)->AllReduce(t.ref(), ReduceOp::kMax);
    Check(Either(s, Miss(t.Read(), dt,
                         [&](int64_t i) {
                           double m = -1e9;
                           for (int r : evens) {
                             m = std::max(m, Value(dt, ReduceOp::kMax, r, i));
                           }
                           return m;
                         }))
              .empty(),
          "max over the even ranks' subgroup " + Either(s, ""));
  } else if (sub.ok()) {
    Check(!(*sub)->is_member(), "an odd rank is not in the even subgroup");
  }
  // Every rank in reverse order: group rank k is world rank size - 1 - k.
  std::vector<int> reversed;
  for (int r = size - 1; r >= 0; --r) reversed.push_back(r);
  auto rev = world.NewGroup(reversed);
  Check(rev.ok() && (*rev)->rank() == size - 1 - rank,
        "NewGroup(reversed): group rank is size - 1 - world rank: " +
            rev.status().ToString());
  if (!rev.ok()) return;
  const DataType dt = DataType::kFloat32;
  Gpu b(dt, Values(dt, ReduceOp::kSum, rank, 23), device);
  absl::Status s = (*rev)->Broadcast(b.ref(), 0);
  std::string wrong = Either(s, Miss(b.Read(), dt, [&](int64_t i) {
                               return Value(dt, ReduceOp::kSum, size - 1, i);
                             }));
  Check(wrong.empty(),
        "broadcast from the reversed group's rank 0 gives world rank " +
            std::to_string(size - 1) + "'s values " + wrong);
  Gpu x(dt, Values(dt, ReduceOp::kSum, rank, 5), device);
  Gpu all(dt, std::vector<double>(5 * size, 0), device);
  s = (*rev)->AllGather(x.ref(), all.ref());
  wrong = Either(s, Miss(all.Read(), dt, [&](int64_t i) {
                   const int from = size - 1 - static_cast<int>(i / 5);
                   return Value(dt, ReduceOp::kSum, from, i % 5);
                 }));
  Check(wrong.empty(),
        "all_gather in the reversed group is in group-rank order " + wrong);
}

// Section 4a: host <-> device copies and an all_reduce on the copy.
void Casting(ProcessGroup& g) {
  std::vector<float> host = {1.5f, -2.f, 3.25f}, back(3);
  auto dev = DeviceBuffer::Allocate(device, 12);
  Check(dev.ok() && dev->device() == device,
        "DeviceBuffer on " + device.ToString());
  if (!dev.ok()) return;
  Check(CopyBytes(dev->data(), device, host.data(), Device::Cpu(), 12).ok(),
        "host -> " + device.ToString());
  absl::Status s = g.AllReduce(
      TensorRef(dev->data(), 3, DataType::kFloat32, device), ReduceOp::kMean);
  Check(
      s.ok() &&
          CopyBytes(back.data(), Device::Cpu(), dev->data(), device, 12).ok() &&
          back == host,
      device.ToString() + " -> host after a mean of equal values: intact");
}

// Section 4b: the GradReducer with CUDA parameters on the NCCL group.
void Reducer(const std::shared_ptr<ProcessGroup>& world) {
  const std::vector<int64_t> sizes = {1000, 37, 4096};
  auto grad_of = [](int r, size_t p, int64_t i) {
    return 0.25 * ((i % 7) + 1) * (r + 1) * (p + 1);
  };
  for (CommHook hook : {CommHook::kNone, CommHook::kFp16Compress}) {
    const std::string what = hook == CommHook::kNone
                                 ? "GradReducer on " + device.ToString()
                                 : "fp16 hook on " + device.ToString();
    std::vector<Gpu> params, grads;
    std::vector<GradReducer::Parameter> ps;
    for (size_t p = 0; p < sizes.size(); ++p) {
      // Different on every rank: Create broadcasts rank 0's.
      std::vector<double> v(sizes[p]);
      for (int64_t i = 0; i < sizes[p]; ++i) v[i] = (i % 5) + 10.0 * rank + p;
      params.emplace_back(DataType::kFloat32, v, device);
      std::vector<double> g(sizes[p]);
      for (int64_t i = 0; i < sizes[p]; ++i) g[i] = grad_of(rank, p, i);
      grads.emplace_back(DataType::kFloat32, g, device);
    }
    for (size_t p = 0; p < sizes.size(); ++p) {
      ps.push_back({params[p].ref(), absl::StrCat("p", p)});
    }
    GradReducer::Options o;
    o.comm_hook = hook;
    o.first_bucket_cap_mb = 4096.0 / (1 << 20);
    auto r = GradReducer::Create(world, ps, {}, o);
    Check(r.ok(), what + ": create: " + r.status().ToString());
    if (!r.ok()) continue;
    std::string miss;
    for (size_t p = 0; p < sizes.size(); ++p) {
      miss += Miss(params[p].Read(), DataType::kFloat32,
                   [&](int64_t i) { return (i % 5) + 0.0 + p; });
    }
    Check(miss.empty(),
          what + ": parameters are rank 0's after Create " + miss);
    miss.clear();
    // Two iterations (the second after the bucket rebuild), each from this
    // rank's own gradients: both give the mean over the ranks.
    absl::Status s;
    for (int it = 0; it < 2 && s.ok(); ++it) {
      for (size_t p = 0; it > 0 && p < sizes.size() && s.ok(); ++p) {
        std::vector<float> g(sizes[p]);
        for (int64_t i = 0; i < sizes[p]; ++i) g[i] = grad_of(rank, p, i);
        s = CopyBytes(grads[p].ref().data(), device, g.data(), Device::Cpu(),
                      sizes[p] * 4);
      }
      for (int p = static_cast<int>(sizes.size()) - 1; p >= 0 && s.ok(); --p) {
        s = (*r)->MarkReady(p, grads[p].ref());
      }
      if (s.ok()) s = (*r)->Finalize();
      const double tol = hook == CommHook::kNone ? 1e-6 : 1e-3;
      for (size_t p = 0; p < sizes.size() && s.ok() && miss.empty(); ++p) {
        const std::vector<double> got = grads[p].Read();
        for (size_t i = 0; i < got.size(); ++i) {
          double sum = 0;
          for (int k = 0; k < size; ++k) sum += grad_of(k, p, i);
          const double want = sum / size;
          if (std::abs(got[i] - want) > tol * std::max(1.0, std::abs(want))) {
            miss = absl::StrCat("iteration ", it, ": p", p, "[", i,
                                "] = ", got[i], ", want ", want);
            break;
          }
        }
      }
    }
    Check(s.ok() && miss.empty(),
          absl::StrCat(what,
                       ": two iterations (with the rebuild) give the "
                       "mean over ",
                       size, " ranks ", s.ok() ? "" : s.ToString(), miss));
    auto reduced = (*r)->ReducedGrad(0);
    Check(reduced.ok() && reduced->device() == device,
          what + ": buckets are device memory");
  }
  std::vector<float> host(8, 1.0f);
  Gpu param(DataType::kFloat32, std::vector<double>(8, 1.0), device);
  auto r = GradReducer::Create(world, {{param.ref(), "w"}}, {}, {});
  Check(r.ok(), "a one-parameter GradReducer: " + r.status().ToString());
  if (r.ok()) {
    absl::Status s = (*r)->MarkReady(
        0, TensorRef(host.data(), host.size(), DataType::kFloat32));
    Check(absl::IsInvalidArgument(s),
          "a host gradient for a CUDA parameter is refused: " + s.ToString());
  }
}

// Section 5: on the simulator, which devices this process touched.
void OwnDeviceOnly(const CudaLibrary& cuda) {
  void* lib = dlopen(cuda.path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  auto mask =
      lib == nullptr
          ? nullptr
          : reinterpret_cast<unsigned (*)()>(dlsym(lib, "dksimContextMask"));
  auto mallocs =
      lib == nullptr
          ? nullptr
          : reinterpret_cast<long (*)(int)>(dlsym(lib, "dksimMallocCount"));
  if (mask == nullptr || mallocs == nullptr) {
    std::printf(
        "  (not the simulator: which devices a rank touched is not "
        "observable here)\n");
    return;
  }
  Check(mask() == (1u << device.index),
        absl::StrCat("the simulator saw contexts only on ", device.ToString(),
                     " (mask ", mask(), ")"));
  int count = 0;
  cuda.GetDeviceCount(&count);
  std::string elsewhere;
  for (int d = 0; d < count; ++d) {
    if (d != device.index && mallocs(d) != 0) {
      absl::StrAppend(&elsewhere, " cuda:", d, " (", mallocs(d), ")");
    }
  }
  Check(elsewhere.empty() && mallocs(device.index) > 0,
        absl::StrCat("allocations only on ", device.ToString(), " (",
                     mallocs(device.index), ")",
                     elsewhere.empty() ? "" : "; also on" + elsewhere));
}

// Section 6: latency and bandwidth, distkit beside raw NCCL (rank 0 prints).
// Where a small operation's time goes: the calling thread's share (the
// asynchronous issue), and the device work distkit queues per operation
// (its signature up, every rank's signatures gathered and brought down, then
// the operation) replayed as raw calls; what is left of distkit's time is
// its threads and its waiting.
void LatencyParts(ProcessGroup& g, const CudaLibrary& cuda,
                  const NcclLibrary& nccl, RawNccl& raw, Gpu& word, int iters) {
  double issue_us = 0;
  for (int i = 0; i < iters; ++i) {
    const auto start = std::chrono::steady_clock::now();
    std::shared_ptr<Work> w = g.AllReduceAsync(word.ref(), ReduceOp::kSum);
    issue_us += std::chrono::duration<double, std::micro>(
                    std::chrono::steady_clock::now() - start)
                    .count();
    w->Wait().IgnoreError();
  }
  issue_us /= iters;
  constexpr size_t kSignature = sizeof(OpSignature);
  auto sig = DeviceBuffer::Allocate(device, kSignature * (size + 1));
  void* pinned = nullptr;
  const bool have =
      sig.ok() && cuda.MallocHost(&pinned, kSignature * size) == cudaSuccess;
  char pageable[kSignature] = {};
  double sequence_us = 0;
  if (have) {
    char* d = static_cast<char*>(sig->data());
    auto sequence = [&] {
      raw.Run([&](ncclComm_t comm, cudaStream_t st) {
           cuda.MemcpyAsync(d, pageable, kSignature, cudaMemcpyHostToDevice,
                            st);
           const ncclResult_t r = nccl.AllGather(d, d + kSignature, kSignature,
                                                 ncclUint8, comm, st);
           if (r != ncclSuccess) return r;
           cuda.MemcpyAsync(pinned, d + kSignature, kSignature * size,
                            cudaMemcpyDeviceToHost, st);
           return nccl.AllReduce(word.ref().data(), word.ref().data(), 1,
                                 ncclFloat, ncclSum, comm, st);
         })
          .IgnoreError();
    };
    for (int i = 0; i < iters / 10; ++i) sequence();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) sequence();
    sequence_us = std::chrono::duration<double, std::micro>(
                      std::chrono::steady_clock::now() - start)
                      .count() /
                  iters;
    cuda.FreeHost(pinned);
  }
  if (rank == 0) {
    std::printf(
        "  its parts: the calling thread's AllReduceAsync %.1f us; distkit's "
        "per-op device work%s replayed raw (signature up, ncclAllGather of the "
        "signatures, down, the ncclAllReduce) %.1f us\n",
        issue_us, size > 1 ? "" : " with more ranks", sequence_us);
  }
  Check(have && issue_us > 0 && sequence_us > 0,
        "the 4-byte all_reduce's parts measured");
}

void Bandwidth(ProcessGroup& g, const CudaLibrary& cuda,
               const NcclLibrary& nccl, RawNccl& raw) {
  const bool quick = std::getenv("GPU_CHECK_QUICK") != nullptr &&
                     std::string(std::getenv("GPU_CHECK_QUICK")) != "0";
  int64_t max_bytes = quick ? (int64_t{1} << 20) : (int64_t{1} << 30);
  if (const char* m = std::getenv("GPU_CHECK_MAX_BYTES")) {
    max_bytes = std::max<int64_t>(4096, std::atoll(m));
  }
  auto micros = [](const std::function<void()>& f, int iters) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) f();
    return std::chrono::duration<double, std::micro>(
               std::chrono::steady_clock::now() - start)
               .count() /
           iters;
  };
  {
    Gpu word(DataType::kFloat32, {1.0}, device);
    const int iters = quick ? 20 : 2000;
    auto ours = [&] { g.AllReduce(word.ref(), ReduceOp::kSum).IgnoreError(); };
    auto theirs = [&] {
      raw.Run([&](ncclComm_t comm, cudaStream_t st) {
           return nccl.AllReduce(word.ref().data(), word.ref().data(), 1,
                                 ncclFloat, ncclSum, comm, st);
         })
          .IgnoreError();
    };
    micros(ours, iters / 10);
    micros(theirs, iters / 10);
    const double us = micros(ours, iters), raw_us = micros(theirs, iters);
    if (rank == 0) {
      std::printf(
          "  4-byte all_reduce, world size %d: distkit %.1f us (%s), raw NCCL "
          "%.1f us\n",
          size, us,
          size > 1 ? "its signature agreement included"
                   : "a lone rank sends no signature",
          raw_us);
    }
    Check(us > 0 && raw_us > 0, "4-byte all_reduce latency measured");
    LatencyParts(g, cuda, nccl, raw, word, iters);
  }
  if (rank == 0) {
    std::printf("  all_reduce float32, world size %d:\n", size);
    std::printf("  %12s %12s %12s %10s %10s %12s\n", "bytes", "distkit us",
                "raw us", "algbw GB/s", "busbw GB/s", "distkit/raw");
  }
  Tally values;
  for (int64_t bytes = 4096; bytes <= max_bytes; bytes *= 4) {
    const int64_t n = bytes / 4;
    // Values first: one all_reduce each of the same rank-dependent input.
    std::vector<float> input(n);
    for (int64_t i = 0; i < n; ++i) input[i] = (rank + i) % 9 - 4.0f;
    auto a = DeviceBuffer::Allocate(device, bytes);
    auto b = DeviceBuffer::Allocate(device, bytes);
    if (!a.ok() || !b.ok()) {
      values.Add(absl::StrCat(bytes, " bytes"), "cudaMalloc failed");
      break;
    }
    TensorRef t(a->data(), n, DataType::kFloat32, device);
    absl::Status s =
        CopyBytes(a->data(), device, input.data(), Device::Cpu(), bytes);
    if (s.ok()) {
      s = CopyBytes(b->data(), device, input.data(), Device::Cpu(), bytes);
    }
    if (s.ok()) s = g.AllReduce(t, ReduceOp::kSum);
    if (s.ok()) {
      s = raw.Run([&](ncclComm_t comm, cudaStream_t st) {
        return nccl.AllReduce(b->data(), b->data(), n, ncclFloat, ncclSum, comm,
                              st);
      });
    }
    std::vector<float> ours(n), theirs(n);
    if (s.ok()) {
      s = CopyBytes(ours.data(), Device::Cpu(), a->data(), device, bytes);
    }
    if (s.ok()) {
      s = CopyBytes(theirs.data(), Device::Cpu(), b->data(), device, bytes);
    }
    std::string miss;
    for (int64_t i = 0; s.ok() && i < n && miss.empty(); ++i) {
      float want = 0;
      for (int r = 0; r < size; ++r) want += (r + i) % 9 - 4.0f;
      if (ours[i] != want || theirs[i] != want) {
        miss = absl::StrCat("[", i, "]: distkit ", ours[i], ", raw ", theirs[i],
                            ", want ", want);
      }
    }
    values.Add(absl::StrCat(bytes, " bytes"), Either(s, miss));
    if (!s.ok()) break;  // the group is unusable: no times to take
    const int iters = quick ? 5 : (bytes >= (int64_t{1} << 28) ? 5 : 20);
    auto ours_op = [&] { g.AllReduce(t, ReduceOp::kSum).IgnoreError(); };
    auto raw_op = [&] {
      raw.Run([&](ncclComm_t comm, cudaStream_t st) {
           return nccl.AllReduce(b->data(), b->data(), n, ncclFloat, ncclSum,
                                 comm, st);
         })
          .IgnoreError();
    };
    micros(ours_op, quick ? 1 : 3);
    const double us = micros(ours_op, iters);
    micros(raw_op, quick ? 1 : 3);
    const double raw_us = micros(raw_op, iters);
    if (rank == 0) {
      const double algbw = bytes / us / 1e3;
      std::printf("  %12lld %12.1f %12.1f %10.2f %10.2f %12.2f\n",
                  static_cast<long long>(bytes), us, raw_us, algbw,
                  algbw * 2.0 * (size - 1) / size,
                  raw_us > 0 ? us / raw_us : 0.0);
    }
  }
  values.Report(
      absl::StrCat("the bandwidth table's all_reduce at every size (4 KiB to ",
                   max_bytes, " bytes) = computed values = raw ncclAllReduce"));
}

int RankMain(const std::string& address, const std::string& token) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  absl::StatusOr<const CudaLibrary*> cuda = LoadCudaLibrary();
  absl::StatusOr<const NcclLibrary*> nccl = LoadNcclLibrary();
  if (!cuda.ok() || !nccl.ok()) {
    Check(false, "CUDA and NCCL load: " +
                     (cuda.ok() ? nccl.status() : cuda.status()).ToString());
    return 1;
  }
  device = Device::Cuda(rank);
  absl::Status s =
      CudaStatus(**cuda, (*cuda)->SetDevice(rank), "cudaSetDevice");
  RegisterBackend(
      "nccl",
      [](const BackendConfig& c) -> absl::StatusOr<std::unique_ptr<Backend>> {
        auto b = NcclBackend::Create(c);
        if (!b.ok()) return b.status();
        return std::unique_ptr<Backend>(*std::move(b));
      },
      NcclBackend::CanRun);
  std::shared_ptr<Store> store;
  if (s.ok()) {
    TcpStore::Options o;
    o.address = address;
    o.token = token;
    o.timeout = kOpTimeout;
    o.connect_timeout = kOpTimeout;
    auto connected = TcpStore::Connect(o);
    s = connected.status();
    if (s.ok()) store = std::shared_ptr<Store>(*std::move(connected));
  }
  std::shared_ptr<ProcessGroup> world;
  if (s.ok()) {
    GroupOptions options;
    options.backend = "nccl";
    options.local_rank = rank;
    options.timeout = kOpTimeout;
    auto created = ProcessGroup::CreateWorld(store, rank, size, options);
    s = created.status();
    if (s.ok()) world = *created;
  }
  Check(s.ok() && world->comm_device() == device,
        absl::StrCat("an nccl ProcessGroup of ", size, " on ",
                     device.ToString(), ": ", s.ToString()));
  if (!s.ok()) return 1;
  RawNccl raw(**cuda, **nccl);
  s = raw.Init(*store);
  Check(s.ok(),
        "a raw NCCL communicator for the reference (ncclCommInitRank): " +
            s.ToString());
  if (!s.ok()) return 1;

  std::printf(
      "1. every operation x dtype against computed values and raw NCCL\n");
  Matrix(*world, **nccl, raw);
  if (size > 1) {
    std::printf("2. sends and receives\n");
    PointToPoint(*world);
  }
  std::printf("3. subgroups\n");
  Subgroups(*world);
  std::printf("4. device memory and the GradReducer\n");
  Casting(*world);
  Reducer(world);
  std::printf("5. the devices this rank touched\n");
  OwnDeviceOnly(**cuda);
  std::printf("6. latency and bandwidth beside raw NCCL\n");
  Bandwidth(*world, **cuda, **nccl, raw);
  Check(world->Barrier().ok(), "the final barrier");
  std::printf("gpu_check rank %d of %d: %d passed, %d failed\n", rank, size,
              passes, failures);
  return failures ? 1 : 0;
}

// The parent: jobs of rank processes.

struct Child {
  pid_t pid = -1;
  int fd = -1;
  std::string partial;  // output after the last newline
  int status = 0;
  bool done = false;
  bool killed = false;
  int failed = 0;         // FAIL lines it printed
  bool finished = false;  // it printed its summary line
};

// A line of rank `r`'s output, as the parent prints it: the PASS / FAIL /
// SKIPPED word first, then the job and rank.
// Counts the rank's PASS and FAIL lines as the parent's own.
void Forward(const std::string& tag, const std::string& line, Child& from) {
  for (const char* word : {"PASS ", "FAIL ", "SKIPPED "}) {
    if (line.rfind(word, 0) == 0) {
      if (word[0] == 'P') ++passes;
      if (word[0] == 'F') ++failures, ++from.failed;
      std::printf("%s%s %s\n", word, tag.c_str(),
                  line.c_str() + std::strlen(word));
      return;
    }
  }
  if (line.rfind("gpu_check rank ", 0) == 0) from.finished = true;
  std::printf("  %s %s\n", tag.c_str(), line.c_str());
}

// Runs a job of `world` ranks (rank r on cuda:r) and reports each rank's
// checks; a rank that exits non-zero, dies or outlives `limit` fails.
bool RunJob(const char* self, int world, absl::Duration limit) {
  std::string token;
  {
    unsigned char bytes[16];
    FILE* f = std::fopen("/dev/urandom", "rb");
    const bool ok = f != nullptr && std::fread(bytes, 1, 16, f) == 16;
    if (f != nullptr) std::fclose(f);
    for (int i = 0; i < 16; ++i) {
      absl::StrAppend(&token, absl::Hex(ok ? bytes[i] : i, absl::kZeroPad2));
    }
  }
  auto server = StoreServer::Start({"127.0.0.1:0", token});
  if (!server.ok()) {
    Check(false, absl::StrCat("world size ", world, ": a store server: ",
                              server.status().ToString()));
    return false;
  }
  std::fflush(stdout);
  std::vector<Child> children(world);
  for (int r = 0; r < world; ++r) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
      Check(false, "pipe2");
      return false;
    }
    const std::string rank_arg = std::to_string(r);
    const std::string world_arg = std::to_string(world);
    const pid_t pid = fork();
    if (pid == 0) {
      dup2(fds[1], 1);
      dup2(fds[1], 2);
      execl(self, self, "--rank", rank_arg.c_str(), world_arg.c_str(),
            (*server)->address().c_str(), token.c_str(),
            static_cast<char*>(nullptr));
      std::fprintf(stderr, "exec %s: %s\n", self, std::strerror(errno));
      _exit(127);
    }
    close(fds[1]);
    children[r].pid = pid;
    children[r].fd = fds[0];
  }
  absl::Time deadline = absl::Now() + limit;
  bool peer_gone = false;
  int running = world;
  auto tag = [&](int r) { return absl::StrCat("[w", world, " r", r, "]"); };
  while (running > 0) {
    std::vector<pollfd> polls;
    std::vector<int> who;
    for (int r = 0; r < world; ++r) {
      if (children[r].fd >= 0) {
        polls.push_back({children[r].fd, POLLIN, 0});
        who.push_back(r);
      }
    }
    const int wait_ms = static_cast<int>(std::clamp<int64_t>(
        absl::ToInt64Milliseconds(deadline - absl::Now()), 0, 200));
    if (!polls.empty()) {
      poll(polls.data(), polls.size(), wait_ms);
    } else {
      absl::SleepFor(absl::Milliseconds(wait_ms));
    }
    for (size_t k = 0; k < polls.size(); ++k) {
      if ((polls[k].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      Child& c = children[who[k]];
      char buf[4096];
      const ssize_t got = read(c.fd, buf, sizeof(buf));
      if (got <= 0) {
        close(c.fd);
        c.fd = -1;
        if (!c.partial.empty()) Forward(tag(who[k]), c.partial, c);
        c.partial.clear();
        continue;
      }
      c.partial.append(buf, got);
      size_t nl;
      while ((nl = c.partial.find('\n')) != std::string::npos) {
        Forward(tag(who[k]), c.partial.substr(0, nl), c);
        c.partial.erase(0, nl + 1);
      }
    }
    for (int r = 0; r < world; ++r) {
      Child& c = children[r];
      if (c.done || c.fd >= 0) continue;
      if (waitpid(c.pid, &c.status, WNOHANG) == c.pid) {
        c.done = true;
        --running;
      }
    }
    // A rank that ended without its summary (it crashed, or NCCL took the
    // process down) leaves its peers waiting: they get one operation
    // timeout to say so, then are killed.
    for (const Child& c : children) {
      if (c.done && !c.finished && !peer_gone) {
        peer_gone = true;
        deadline =
            std::min(deadline, absl::Now() + kOpTimeout + absl::Seconds(15));
      }
    }
    if (absl::Now() >= deadline && running > 0) {
      for (Child& c : children) {
        if (!c.done) {
          kill(c.pid, SIGKILL);
          c.killed = true;
        }
      }
      for (Child& c : children) {
        if (!c.done) {
          waitpid(c.pid, &c.status, 0);
          c.done = true;
          if (c.fd >= 0) close(c.fd);
          c.fd = -1;
        }
      }
      running = 0;
    }
  }
  bool ok = true;
  for (int r = 0; r < world; ++r) {
    const Child& c = children[r];
    if (c.killed) {
      Check(false,
            absl::StrCat(
                tag(r), " still running ",
                peer_gone ? "after a peer ended early"
                          : absl::StrCat("after ", absl::FormatDuration(limit),
                                         " (GPU_CHECK_TIMEOUT_S)"),
                ": killed"));
      ok = false;
    } else if (WIFSIGNALED(c.status)) {
      Check(false,
            absl::StrCat(tag(r), " died of signal ", WTERMSIG(c.status)));
      ok = false;
    } else if ((WEXITSTATUS(c.status) != 0 && c.failed == 0) || !c.finished) {
      Check(false,
            absl::StrCat(tag(r), " exited with status ", WEXITSTATUS(c.status),
                         c.finished ? "" : " before its summary"));
      ok = false;
    } else if (c.failed > 0) {
      ok = false;
    }
  }
  return ok;
}

int ParentMain(const char* self) {
  absl::StatusOr<const CudaLibrary*> cuda = LoadCudaLibrary();
  absl::StatusOr<const NcclLibrary*> nccl = LoadNcclLibrary();
  if (!cuda.ok() || !nccl.ok()) {
    std::printf(
        "SKIPPED every C++ GPU check: %s (the build succeeded)\n",
        std::string((cuda.ok() ? nccl.status() : cuda.status()).message())
            .c_str());
    return kSkipped;
  }
  int runtime = 0, driver = 0, count = 0;
  (*cuda)->RuntimeGetVersion(&runtime);
  (*cuda)->DriverGetVersion(&driver);
  const cudaError_t counted = (*cuda)->GetDeviceCount(&count);
  if (counted != cudaSuccess) count = 0;
  std::printf(
      "gpu_check: CUDA runtime %d (driver %d) from %s; NCCL %d from %s; %d "
      "device(s)\n",
      runtime, driver, (*cuda)->path.c_str(), (*nccl)->version,
      (*nccl)->path.c_str(), count);
  if (count == 0) {
    std::printf(
        "SKIPPED every C++ GPU check: no usable GPU here (%s); the "
        "build succeeded\n",
        std::string(CudaStatus(**cuda, counted, "cudaGetDeviceCount").message())
            .c_str());
    return kSkipped;
  }
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp prop;
    if ((*cuda)->GetDeviceProperties(&prop, d) == cudaSuccess) {
      std::printf("gpu_check: cuda:%d is %s (%.1f GiB)\n", d, prop.name,
                  prop.totalGlobalMem / double(1 << 30));
    }
  }
  absl::Duration limit = absl::Seconds(600);
  if (const char* t = std::getenv("GPU_CHECK_TIMEOUT_S")) {
    limit = absl::Seconds(std::max(1, std::atoi(t)));
  }
  std::printf("== world size 1 on cuda:0\n");
  RunJob(self, 1, limit);
  const int world = std::min(count, 4);
  if (world >= 2) {
    std::printf("== world size %d, rank r on cuda:r\n", world);
    RunJob(self, world, limit);
  } else {
    std::printf(
        "SKIPPED the multi-rank NCCL checks (world size 2-4, a GPU each): "
        "needs 2 GPUs, %d here\n",
        count);
  }
  std::printf("gpu_check: %d passed, %d failed\n", passes, failures);
  return failures ? 1 : 0;
}

}  // namespace
}  // namespace distkit

int main(int argc, char** argv) {
  using namespace distkit;
  if (argc == 6 && std::string(argv[1]) == "--rank") {
    rank = std::atoi(argv[2]);
    size = std::atoi(argv[3]);
    return RankMain(argv[4], argv[5]);
  }
  setvbuf(stdout, nullptr, _IOLBF, 0);
  // The rank processes run this file again: /proc/self/exe survives a
  // relative argv[0] and a changed directory.
  return ParentMain("/proc/self/exe");
}
