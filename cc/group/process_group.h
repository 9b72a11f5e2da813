// ProcessGroup is a fixed set of ranks and the backend they talk through. It
// checks arguments, numbers operations (the same sequence on every rank), runs
// them in order (OpQueue), and hands out Work for asynchronous calls. What
// every backend must keep across ranks (signature agreement, poison and
// abort, the mean, split and point-to-point checks) is CollectiveContract's;
// backends come from the registry by name (cc/comm/backend_registry.h).
//
//   DK_ASSIGN_OR_RETURN(auto world,
//                       ProcessGroup::CreateWorld(store, rank, size, {}));
//   DK_RETURN_IF_ERROR(world->AllReduce(grad, ReduceOp::kMean));
//   DK_ASSIGN_OR_RETURN(auto pair, world->NewGroup({0, 3}));  // collective
//   if (pair->is_member()) DK_RETURN_IF_ERROR(pair->Broadcast(t, /*root=*/0));
//
// Ranks passed to operations (root, src, dst) are ranks within the group.
// Errors name the operation, its sequence number, the group and the rank:
// "all_reduce #12 on group 'world' (rank 1): ...". A timeout also says which
// ranks never joined. After a timeout or a peer failure the group is poisoned:
// every later call fails; Abort() and a new group are the way on.
//
// Threads: every call is safe from any thread, but a group's collectives are
// one sequence that every rank must issue in the same order, so they come
// from one thread at a time. A collective issued while another thread's
// collectives on the group are still in flight is FAILED_PRECONDITION (it
// could otherwise be paired with a different call on another rank and give
// silently wrong data). Handing the group from thread to thread when it is
// idle is allowed; the order must then be the same on every rank. Code that
// hands its one sequence of calls between threads while some are in flight
// (autograd's device thread, a goroutine) names one issuer for them
// (issuer.h). Sends and receives are exempt: they are matched by peer and
// tag.

#ifndef DISTKIT_CC_GROUP_PROCESS_GROUP_H_
#define DISTKIT_CC_GROUP_PROCESS_GROUP_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "cc/comm/backend.h"
#include "cc/comm/op_code.h"
#include "cc/comm/work.h"
#include "cc/core/bench_without.h"
#include "cc/core/device.h"
#include "cc/core/inline_function.h"
#include "cc/core/light_mutex.h"
#include "cc/core/reduce_op.h"
#include "cc/core/tensor_ref.h"
#include "cc/group/collective_contract.h"
#include "cc/group/flight_recorder.h"
#include "cc/group/op_queue.h"
#include "cc/store/store.h"

namespace distkit {

struct GroupOptions {
  // "gloo" (CPU tensors), "mpi" (CPU, under mpirun), "nccl" (CUDA tensors)
  // or "cpu:gloo,cuda:nccl" (by tensor device) when built with CUDA.
  std::string backend = "gloo";
  // This process's rank on its node: NCCL uses cuda:<local_rank>. NewGroup
  // takes the parent's (the process is the same).
  int local_rank = 0;
  // Per-operation timeout (c10d's default for process groups is 30 min).
  absl::Duration timeout = absl::Minutes(30);
  // How long creating the group waits for its members to connect; zero:
  // `timeout`. A job whose ranks start far apart (a loaded machine, a
  // scheduler that starts nodes late) may join slowly and still want its
  // collectives to fail fast. NewGroup(ranks) does not pass it on.
  absl::Duration connect_timeout = absl::ZeroDuration();
  // The address other ranks reach this rank's Gloo device at. Empty:
  // $DISTKIT_GLOO_HOSTNAME, else the address of the interface
  // $DISTKIT_SOCKET_IFNAME / $GLOO_SOCKET_IFNAME names, else that of the
  // interface that routes to the store (loopback stays loopback), found
  // without name lookups (cc/comm/gloo/listen_address.h).
  std::string hostname;
  // NewGroup: the new group's name below its parent ("world/<name>"); empty
  // numbers it ("world/1"). Groups created with different rank lists on
  // different ranks (one per node) must be named apart.
  std::string name;
  // NewGroup: only the members of the new group call it (torch.distributed
  // creates a backend's groups on their members alone), each with the same
  // ranks and `name` (required). Where the parent's backend splits its
  // connection (MPI, NCCL) the members make the subgroup among themselves
  // (Backend::CreateAmongMembers).
  bool members_only = false;
};

class ProcessGroup {
 public:
  // The world group of a job: every rank of `store`'s job calls it with its
  // rank and the job's size. Blocks until all ranks have connected.
  // options.name names it ("world" when empty): a grown world is
  // "world@g<generation>" (grow.h), its keys apart from every other's.
  static absl::StatusOr<std::shared_ptr<ProcessGroup>> CreateWorld(
      std::shared_ptr<Store> store, int rank, int size, GroupOptions options);

  ~ProcessGroup();

  // Collective over this group: every member calls it, in the same order
  // relative to its other NewGroup calls, with the same `ranks` (ranks of this
  // group, any order; the new group numbers them in the order given). Members
  // of `ranks` get a working group; the others get a handle with
  // is_member() == false whose operations fail with FAILED_PRECONDITION.
  // On a group that failed or was aborted the new group connects afresh
  // through the store, also where it would split the parent's connection.
  // With options.members_only, only the members call it (see GroupOptions).
  absl::StatusOr<std::shared_ptr<ProcessGroup>> NewGroup(
      std::vector<int> ranks);
  absl::StatusOr<std::shared_ptr<ProcessGroup>> NewGroup(std::vector<int> ranks,
                                                         GroupOptions options);

  const std::string& name() const { return name_; }
  const std::string& backend_name() const { return options_.backend; }
  bool is_member() const { return rank_ >= 0; }
  // This process's rank in the group; -1 when not a member.
  int rank() const { return rank_; }
  int size() const { return static_cast<int>(global_ranks_.size()); }
  // The world ranks of the members, in group order.
  const std::vector<int>& global_ranks() const { return global_ranks_; }
  int global_rank() const { return global_rank_; }
  absl::Duration timeout() const { return options_.timeout; }
  // Where this group's collectives compute: cpu for gloo.
  // mmengine's get_comm_device: cuda:<device> for NCCL, else cpu.
  Device comm_device() const {
    return contract_ != nullptr ? contract_->backend().comm_device()
                                : Device::Cpu();
  }
  // The group's private namespace in the job store.
  const std::shared_ptr<Store>& store() const { return store_; }
  // The store its world was created on (CreateWorld's), shared by the whole
  // family of groups; membership changes (grow.h) meet there.
  const std::shared_ptr<Store>& world_store() const { return world_store_; }
  // What it was created with (backend, timeout, this host's address).
  const GroupOptions& options() const { return options_; }

  // The CUDA stream the caller's work on this group's device runs on (a
  // cudaStream_t; nullptr, the default: the legacy default stream). Every
  // CUDA operation issued afterwards follows the work on it that was issued
  // before the operation, as torch's ProcessGroupNCCL does with the current
  // stream; Wait() returns once the operation's device work is done. Ignored
  // by groups without a CUDA device. Set it from the thread that issues.
  absl::Status SetCudaStream(void* stream);
  // What SetCudaStream set: the stream the GradReducer's and FlatShard's
  // copies run on (copy_stream.h).
  void* cuda_stream() const;

  // Synchronous operations (see Backend for buffer conventions).
  absl::Status AllReduce(TensorRef data, ReduceOp op);
  absl::Status Broadcast(TensorRef data, int root);
  absl::Status Reduce(TensorRef data, ReduceOp op, int root);
  absl::Status AllGather(TensorRef input, TensorRef output);
  // All-gather into one buffer per rank.
  absl::Status AllGather(TensorRef input,
                         const std::vector<TensorRef>& outputs);
  absl::Status Gather(TensorRef input, TensorRef output, int root);
  absl::Status Scatter(TensorRef input, TensorRef output, int root);
  absl::Status ReduceScatter(TensorRef input, TensorRef output, ReduceOp op);
  // Empty splits: equal parts.
  absl::Status AllToAll(TensorRef input, TensorRef output,
                        std::vector<int64_t> input_splits = {},
                        std::vector<int64_t> output_splits = {});
  absl::Status Barrier();
  absl::Status Send(TensorRef data, int dst, int tag = 0);
  absl::Status Recv(TensorRef data, int src, int tag = 0);

  // Asynchronous forms: return at once; buffers are lent until the Work
  // completes. Argument errors come back as an already-failed Work.
  std::shared_ptr<Work> AllReduceAsync(TensorRef data, ReduceOp op);
  std::shared_ptr<Work> BroadcastAsync(TensorRef data, int root);
  std::shared_ptr<Work> ReduceAsync(TensorRef data, ReduceOp op, int root);
  std::shared_ptr<Work> AllGatherAsync(TensorRef input, TensorRef output);
  std::shared_ptr<Work> GatherAsync(TensorRef input, TensorRef output,
                                    int root);
  std::shared_ptr<Work> ScatterAsync(TensorRef input, TensorRef output,
                                     int root);
  std::shared_ptr<Work> ReduceScatterAsync(TensorRef input, TensorRef output,
                                           ReduceOp op);
  std::shared_ptr<Work> AllToAllAsync(TensorRef input, TensorRef output,
                                      std::vector<int64_t> input_splits = {},
                                      std::vector<int64_t> output_splits = {});
  std::shared_ptr<Work> BarrierAsync();
  std::shared_ptr<Work> SendAsync(TensorRef data, int dst, int tag = 0);
  std::shared_ptr<Work> RecvAsync(TensorRef data, int src, int tag = 0);

  // Local: cancels what is in flight and makes every later call fail.
  void Abort();
  // The first error that poisoned the group, OK if none.
  absl::Status AsyncError() const;

 private:
  // An operation's body, held in place (no allocation on the synchronous
  // path): its captures are the group, up to two tensor views (72 bytes
  // each) and a root, a reduction or all_to_all's splits (200 bytes).
  // A body that outgrows it fails to compile (no heap fallback).
  using Body = InlineFunction<absl::Status(const OpContext&), 208,
                              /*kHeap=*/false>;

  ProcessGroup(std::string name, std::shared_ptr<Store> store,
               std::shared_ptr<Store> world_store,
               std::vector<int> global_ranks, int global_rank,
               GroupOptions options);

  // Builds this member's backend (from the registry, unless `split` derived
  // it from the parent) and waits for every member.
  absl::Status Connect(std::unique_ptr<Backend> split);
  // Creating the group waits this long for its members (GroupOptions).
  absl::Duration ConnectTimeout() const;
  // Checks membership and the poisoned state, then numbers and queues `body`.
  // One operation, checked and ready to run: inline (RunSync) or queued
  // (Submit). `peer` >= 0 marks a send or receive with that peer.
  struct Op {
    OpCode code;
    absl::Status checked;
    Body body;
    int peer = -1;
    // Where its tensors are: a CUDA operation follows the caller's stream
    // from the point where it was issued (Backend::MarkIssue).
    Device device = Device::Cpu();
    int tag = 0;  // a send's or receive's
  };
  // The issue mark of `op` (nullptr: none), or why it could not be made.
  absl::StatusOr<void*> MarkIssue(const Op& op);
  std::shared_ptr<Work> Submit(Op op);
  absl::Status RunSync(Op op);
  // Not OK when `op` must not run: not a member, or its arguments are wrong.
  absl::Status Rejection(const Op& op) const;
  OpContext NextContext(const Op& op);
  // The lane a send or receive runs on (collectives: queue_).
  std::shared_ptr<OpQueue> LaneFor(const Op& op);

  Op AllReduceOp(TensorRef data, ReduceOp op);
  Op BroadcastOp(TensorRef data, int root);
  Op ReduceToRootOp(TensorRef data, ReduceOp op, int root);
  Op AllGatherOp(TensorRef input, TensorRef output);
  Op GatherOp(TensorRef input, TensorRef output, int root);
  Op ScatterOp(TensorRef input, TensorRef output, int root);
  Op ReduceScatterOp(TensorRef input, TensorRef output, ReduceOp op);
  Op AllToAllOp(TensorRef input, TensorRef output,
                std::vector<int64_t> input_splits,
                std::vector<int64_t> output_splits);
  Op BarrierOp();
  Op SendOp(TensorRef data, int dst, int tag);
  Op RecvOp(TensorRef data, int src, int tag);
  absl::Status CheckSplits(const std::vector<int64_t>& splits,
                           const TensorRef& t, absl::string_view what) const;
  // Runs `body` under the contract; a failure gets the diagnosis its kind
  // calls for. `peer`: a send's or receive's peer (-1: a collective).
  absl::Status Execute(const OpContext& ctx, const Body& body, int peer = -1);
  // The thread rule of collectives: one thread issues them at a time. A
  // collective from another thread while one is in flight is refused
  // (FAILED_PRECONDITION): the ranks could pair its data with a different
  // call. Claim before numbering and queueing; Release once it has run.
  absl::Status ClaimIssue(const Op& op);
  void ReleaseIssue();
  // After a timeout: which members joined operation `ctx.seq`.
  std::string DiagnoseLateRanks(const OpContext& ctx);
  // "on host(s) a, b" for these group ranks where the store knows their
  // hosts, else "".
  std::string HostsOf(const std::vector<int>& ranks);
  // "; every rank reached this operation, but rank 3's device had not
  // started it (...); ranks 0, 1, 2 were inside it on their devices": what
  // the roll call's answers under `prefix` said of where each rank's part
  // was (Backend::WhereOpFailed); "" where none said.
  std::string WhereRanksWere(const OpContext& ctx, const std::string& prefix);
  // OpContext::answer_roll_call for this group (`group`): posts this rank's
  // answer for `ctx` before its backend returns. Execute also posts one,
  // where the backend did not, for a collective this rank ended with a
  // failure that poisons the group other than its own timeout (an abort, a
  // lost peer), so that a rank whose operation timed out does not name
  // this one absent.
  static void AnswerRollCall(void* group, const OpContext& ctx,
                             DevicePlace place);

  absl::Status CheckTensor(const TensorRef& t, absl::string_view what) const;
  absl::Status CheckRank(int r, absl::string_view what) const;
  absl::Status CheckReduce(const TensorRef& t, ReduceOp op) const;

  const std::string name_;
  std::shared_ptr<Store> store_;
  // 1 + the seq of the last collective whose roll call AnswerRollCall
  // answered (0: none): Execute's answer after a failure is not posted
  // again over the backend's.
  std::atomic<uint64_t> last_answered_seq_{0};
  const std::shared_ptr<Store> world_store_;
  const std::vector<int> global_ranks_;
  const int global_rank_;
  const int rank_;
  GroupOptions options_;
  // The last operations of this group on this rank (flight_recorder.h).
  std::unique_ptr<FlightRecorder> recorder_;
  // Safety features a benchmark turned off (DISTKIT_BENCH_WITHOUT), read
  // once, at Connect.
  BenchWithout without_;
  // The backend under the contract every backend keeps; null off-member.
  std::unique_ptr<CollectiveContract> contract_;
  std::atomic<uint64_t> next_seq_{0};      // collectives
  std::atomic<uint64_t> next_p2p_seq_{0};  // sends and receives
  // Numbers unnamed NewGroup calls (collective, so alike on every rank);
  // named groups, which their members alone may make, take none.
  int next_child_ = 0;

  // The issuer of the collectives in flight (issuer.h: a thread unless it
  // names another; high half) and how many there are (low half).
  static constexpr uint64_t kInFlightMask = 0xffffffffu;
  std::atomic<uint64_t> issue_state_{0};
  // Sends and receives submitted and not yet completed: counted down before
  // their Work completes, so a group destroyed right after a blocking send
  // returned is not taken for busy (its lane ends its run just after).
  std::atomic<int64_t> p2p_in_flight_{0};

  LightMutex mu_;

  // Declared last, so destroyed first: their workers are joined while
  // everything a running operation touches (contract, recorder, mutex) is
  // still alive.
  OpQueue queue_;
  // Sends' and receives' lanes by (peer, is a send, tag): see LaneFor.
  std::map<std::tuple<int, bool, int>, std::shared_ptr<OpQueue>> p2p_lanes_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace distkit

#endif  // DISTKIT_CC_GROUP_PROCESS_GROUP_H_
