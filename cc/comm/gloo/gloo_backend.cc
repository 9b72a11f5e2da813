#include "cc/comm/gloo/gloo_backend.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/alltoallv.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/gather.h>
#include <gloo/reduce.h>
#include <gloo/scatter.h>
#include <gloo/transport/tcp/attr.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cc/comm/gloo/listen_address.h"
#include "cc/comm/gloo/pair_mesh.h"
#include "cc/comm/gloo/tcp_device.h"
#include "cc/comm/reduce_kernels.h"
#include "cc/core/status.h"
#include "cc/store/call_deadline.h"

namespace distkit {
namespace {

// Slot prefixes for our own unbound-buffer traffic; Gloo's algorithms use
// small prefixes (< 0x20), so these never collide with theirs.
constexpr uint8_t kReduceScatterSlot = 0xd1;
constexpr uint8_t kPointToPointSlot = 0xd2;
constexpr uint8_t kAgreeSlot = 0xd4;
constexpr uint8_t kAllGatherSlot = 0xd5;

// Up to this group size the signature exchange is a direct one-hop exchange
// (every rank sends its record to every other); above it, Gloo's ring.
constexpr int kDirectExchangeMaxRanks = 32;

// Each record is a 64-byte header (the signature, zero-padded) and then the
// payload, and records are 64-byte multiples, so payloads are aligned for any
// element type.
constexpr size_t kHeaderBytes = 64;
static_assert(sizeof(OpSignature) <= kHeaderBytes,
              "the signature fits the header");

size_t InlineLimit(int size) {
  if (size > kDirectExchangeMaxRanks) return GlooBackend::kRingInlineBytes;
  const size_t limit =
      std::max(GlooBackend::kRingInlineBytes,
               GlooBackend::kInlineBudget / std::max(1, size - 1));
  return limit / kHeaderBytes * kHeaderBytes;
}

// How a ring step's block is cut into pieces: `total` units (elements for a
// reduction, bytes otherwise) in pieces of whole units, kPieceBytes to twice
// that (larger in blocks above kMostPieces of them). A piece goes on to the
// next rank as soon as it has arrived (and is folded), instead of after the
// whole block: the link then does not idle for each step's fold and wake-up.
class RingPieces {
 public:
  static constexpr size_t kPieceBytes = 128 << 10;
  static constexpr int64_t kMostPieces = 16;

  RingPieces(int64_t total, size_t unit_bytes)
      : total_(total),
        count_(std::clamp<int64_t>(
            static_cast<int64_t>(total * unit_bytes / kPieceBytes), 1,
            kMostPieces)) {}

  int count() const { return static_cast<int>(count_); }
  // Piece p: units [begin(p), begin(p) + size(p)).
  int64_t begin(int p) const { return total_ * p / count_; }
  int64_t size(int p) const { return begin(p + 1) - begin(p); }

 private:
  int64_t total_;
  int64_t count_;
};

// Thrown inside a guarded body when Abort() woke a wait.
struct AbortedWait : std::exception {
  const char* what() const noexcept override { return "aborted"; }
};

std::chrono::milliseconds Millis(absl::Duration d) {
  return std::chrono::milliseconds(
      std::max<int64_t>(1, absl::ToInt64Milliseconds(d)));
}

uint32_t Tag(const OpContext& ctx) { return static_cast<uint32_t>(ctx.seq); }

// One op's Gloo options: on the group's context, with the op's tag (its
// sequence number), and as timeout what is left until the op's deadline
// (Gloo gives each of its waits that much: an algorithm may overrun the
// deadline by what its first waits took, never more than the timeout).
template <typename Options>
Options OptionsFor(const std::shared_ptr<gloo::Context>& context,
                   const OpContext& ctx, absl::Time deadline) {
  Options opts(context);
  opts.setTag(Tag(ctx));
  opts.setTimeout(Millis(deadline - absl::Now()));
  return opts;
}

// The deadlines of the operations a thread runs. An operation's phases
// (the signature exchange, an all_to_all's split matrix, the data; a send's
// header and its data) are separate calls into the backend with one
// OpContext, made one after another by the thread that runs the operation;
// the first call starts the operation's clock and the later ones share its
// deadline. A few slots, so that an operation of a backend built of others
// (hierarchical) that calls two Gloo backends in turn keeps both deadlines.
// Sequence number 0 is no group operation's (a group's creation barrier):
// each such call has a deadline of its own. A deadline set in the context
// replaces all of this.
struct DeadlineSlot {
  uint64_t backend = 0;  // GlooBackend::id_; 0: unused
  uint64_t seq = 0;
  OpCode op = OpCode::kBarrier;
  absl::Duration timeout;
  absl::Time deadline;
};
constexpr int kDeadlineSlots = 4;
thread_local DeadlineSlot deadline_slots[kDeadlineSlots];
thread_local int next_deadline_slot = 0;

absl::Time DeadlineOf(uint64_t backend, const OpContext& ctx) {
  // Fixed by the caller for all of the operation's parts (OpContext::
  // deadline: a hierarchical group's link stage, on a thread of its own).
  if (ctx.deadline != absl::InfiniteFuture()) return ctx.deadline;
  const absl::Time now = absl::Now();
  if (ctx.seq == 0) return now + ctx.timeout;
  for (DeadlineSlot& slot : deadline_slots) {
    if (slot.backend == backend && slot.seq == ctx.seq && slot.op == ctx.op &&
        slot.timeout == ctx.timeout) {
      return slot.deadline;
    }
  }
  DeadlineSlot& slot = deadline_slots[next_deadline_slot];
  next_deadline_slot = (next_deadline_slot + 1) % kDeadlineSlots;
  slot = DeadlineSlot{backend, ctx.seq, ctx.op, ctx.timeout, now + ctx.timeout};
  return slot.deadline;
}

std::atomic<uint64_t> next_backend_id{1};

// Calls f(T*) with a pointer type whose size is the element size of `dtype`
// (Gloo segments buffers at element boundaries using sizeof(T)).
template <typename F>
void WithElementType(DataType dtype, void* data, F&& f) {
  switch (ElementSize(dtype)) {
    case 1:
      return f(static_cast<uint8_t*>(data));
    case 2:
      return f(static_cast<uint16_t*>(data));
    case 4:
      return f(static_cast<uint32_t*>(data));
    default:
      return f(static_cast<uint64_t*>(data));
  }
}

void IgnoreSigpipeUnlessHandled() {
  struct sigaction current;
  if (sigaction(SIGPIPE, nullptr, &current) == 0 &&
      current.sa_handler == SIG_DFL) {
    signal(SIGPIPE, SIG_IGN);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<GlooBackend>> GlooBackend::Create(
    std::shared_ptr<Store> store, int rank, int size, const Options& options) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("gloo: rank ", rank, " is outside [0, ", size, ")"));
  }
  // A peer that dies while this rank writes to it must be an error on the
  // write (EPIPE, then UNAVAILABLE), not SIGPIPE killing this rank: Gloo's
  // TCP pairs do not all write with MSG_NOSIGNAL. Only the default action
  // is replaced; a handler the program installed is kept.
  IgnoreSigpipeUnlessHandled();
  // Connecting on demand, only the listening socket is made here.
  const std::string failed =
      options.connect_on_demand
          ? absl::StrCat(", could not listen on ", options.hostname, ": ")
          : absl::StrCat(", listening on ", options.hostname,
                         ", could not connect to its peers: ");
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.hostname;
    std::shared_ptr<gloo::transport::Device> device = CreateTcpDevice(attr);
    // Connecting stays within what is left of init's deadline, if any.
    const absl::Duration connect_timeout =
        std::max(ClampToStoreDeadline(options.timeout), absl::Milliseconds(1));
    auto mesh = std::make_unique<PairMesh>(std::move(store), rank, size, device,
                                           connect_timeout, options.names);
    if (!options.connect_on_demand) {
      const std::atomic<bool> never_aborted{false};
      mesh->ConnectAll(connect_timeout, never_aborted);
    }
    return std::unique_ptr<GlooBackend>(
        new GlooBackend(rank, size, std::move(mesh), options.names));
  } catch (const gloo::IoException& e) {
    const bool timeout =
        absl::StrContains(e.what(), "DEADLINE_EXCEEDED") ||
        absl::StrContains(absl::AsciiStrToLower(e.what()), "timeout") ||
        absl::StrContains(absl::AsciiStrToLower(e.what()), "timed out");
    const std::string msg =
        absl::StrCat("gloo: ", options.names.Here(rank), failed, e.what());
    return timeout ? absl::DeadlineExceededError(msg)
                   : absl::UnavailableError(msg);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("gloo: ", options.names.Here(rank), failed, e.what()));
  }
}

absl::StatusOr<std::unique_ptr<GlooBackend>> GlooBackend::Create(
    const BackendConfig& config, bool connect_on_demand) {
  Options options;
  options.timeout = config.timeout;
  options.hostname = config.hostname;
  options.names = config.names;
  options.connect_on_demand = connect_on_demand;
  DK_ASSIGN_OR_RETURN(options.hostname, ListenHostname(config));
  return Create(config.store, config.rank, config.size, options);
}

absl::StatusOr<std::string> GlooBackend::ListenHostname(
    const BackendConfig& config) {
  if (!config.hostname.empty()) return config.hostname;
  absl::StatusOr<ListenAddress> chosen = ChooseListenAddress(
      config.store != nullptr ? config.store->ServerAddress() : "");
  if (!chosen.ok()) {
    return Annotate(chosen.status(),
                    absl::StrCat("gloo: ", config.names.Here(config.rank),
                                 ": choosing the address to listen on"));
  }
  return chosen->address;
}

GlooBackend::GlooBackend(int rank, int size, std::unique_ptr<PairMesh> mesh,
                         RankNames names)
    : id_(next_backend_id.fetch_add(1)),
      rank_(rank),
      size_(size),
      names_(std::move(names)),
      mesh_(std::move(mesh)),
      context_(mesh_->context()),
      slot_bytes_(kHeaderBytes + InlineLimit(size)),
      send_slot_(new char[slot_bytes_]),
      recv_slots_(new char[slot_bytes_ * size]) {
  // What is sent beyond the signature and payload (the header's padding;
  // with Gloo's ring, which sends whole slots, the rest of the slot) goes out
  // as zeros, never as uninitialized memory.
  std::memset(send_slot_.get(), 0,
              size_ > kDirectExchangeMaxRanks ? slot_bytes_ : kHeaderBytes);
  agree_send_ = context_->createUnboundBuffer(send_slot_.get(), slot_bytes_);
  agree_recv_ =
      context_->createUnboundBuffer(recv_slots_.get(), slot_bytes_ * size_);
}

GlooBackend::~GlooBackend() = default;

void GlooBackend::Abort() {
  if (aborted_.exchange(true)) return;
  {
    absl::MutexLock lock(&mu_);
    // Wake every wait in progress; each returns false and its op fails.
    for (gloo::transport::UnboundBuffer* b : inflight_) {
      b->abortWaitRecv();
      b->abortWaitSend();
    }
  }
  // And those inside Gloo's algorithms (allreduce, broadcast, ...).
  const size_t live = mesh_->AbortWaits();
  // An operation it interrupted (buffers alive beyond the agreement's two,
  // which live as long as the backend) may leave receives posted to the
  // peers for buffers about to be gone: data a peer sends then can never
  // be read, and Gloo's loop thread would poll that connection without
  // end. Closing the connections ends that (the peers' waits on this rank
  // fail). Otherwise they stay: an abort of a healthy group (a grow
  // replaces it) must not reset a connection whose last bytes a peer may
  // still be reading, and peers waiting in the agreement end by their own
  // abort or deadline, with the late ranks named. (A buffer made after
  // AbortWaits() cannot post: its sends and receives throw.)
  if (live > 2) mesh_->CloseAll();
}

void GlooBackend::Disconnect() {
  Abort();
  mesh_->CloseAll();
}

void GlooBackend::Wait(gloo::transport::UnboundBuffer& buffer, bool recv,
                       absl::Time deadline) {
  {
    absl::MutexLock lock(&mu_);
    if (aborted_.load()) throw AbortedWait();
    inflight_.insert(&buffer);
  }
  bool completed = false;
  try {
    // What is left of the operation's time, not its whole timeout again.
    const std::chrono::milliseconds left = Millis(deadline - absl::Now());
    completed = recv ? buffer.waitRecv(left) : buffer.waitSend(left);
  } catch (...) {
    absl::MutexLock lock(&mu_);
    inflight_.erase(&buffer);
    throw;
  }
  absl::MutexLock lock(&mu_);
  inflight_.erase(&buffer);
  if (!completed) throw AbortedWait();
}

absl::Time GlooBackend::Deadline(const OpContext& ctx) const {
  return DeadlineOf(id_, ctx);
}

absl::Status GlooBackend::Cancelled(const OpContext& ctx) const {
  return absl::CancelledError(absl::StrCat(
      ctx.Describe(), " (", names_.Here(rank_), "): the group was aborted"));
}

absl::Status GlooBackend::Guarded(const OpContext& ctx,
                                  const std::function<void(absl::Time)>& body,
                                  int peer) {
  // Aborted: nothing starts (the peers may be gone already; a Gloo
  // algorithm's first wait would throw anyway).
  if (aborted_.load()) return Cancelled(ctx);
  // The operation's deadline (its first call into this backend starts it).
  const absl::Time deadline = Deadline(ctx);
  // Nothing left (a later phase, or the link stage of a hierarchical
  // operation whose other stages used its deadline up): timed out without
  // a Gloo call, whose timeout would close this rank's connections (Gloo's
  // context signals it to every pair) under peers still inside the
  // operation, which would read a failure instead of their own timeout.
  if (absl::Now() >= deadline) {
    return absl::DeadlineExceededError(
        absl::StrCat(ctx.Describe(), " (", names_.Here(rank_),
                     "): timed out after ", absl::FormatDuration(ctx.timeout),
                     " waiting for peers: no time was left for this call"));
  }
  absl::Status status;
  try {
    // The pairs this call needs, connected on first use (pair_mesh.h),
    // within what is left of the operation's time.
    const absl::Duration left =
        std::max(deadline - absl::Now(), absl::Milliseconds(1));
    if (peer == kAllPeers) {
      mesh_->ConnectAll(left, aborted_);
    } else {
      mesh_->ConnectPair(peer, left, aborted_);
    }
    body(deadline);
    return absl::OkStatus();
  } catch (const gloo::IoException& e) {
    const std::string what = absl::AsciiStrToLower(e.what());
    if (absl::StrContains(what, "timeout") ||
        absl::StrContains(what, "timed out")) {
      status = absl::DeadlineExceededError(absl::StrCat(
          ctx.Describe(), " (", names_.Here(rank_), "): timed out after ",
          absl::FormatDuration(ctx.timeout), " waiting for peers: ", e.what()));
    } else {
      status = absl::UnavailableError(absl::StrCat(
          ctx.Describe(), " (", names_.Here(rank_),
          "): a peer failed or closed its connection: ", e.what()));
    }
  } catch (const AbortedWait&) {
    status = Cancelled(ctx);
  } catch (const gloo::EnforceNotMet& e) {
    status = absl::InternalError(absl::StrCat(
        ctx.Describe(), " (", names_.Here(rank_), "): gloo: ", e.what()));
  } catch (const std::exception& e) {
    status = absl::UnavailableError(absl::StrCat(
        ctx.Describe(), " (", names_.Here(rank_), "): ", e.what()));
  }
  if (aborted_.load()) status = Cancelled(ctx);
  return status;
}

absl::Status GlooBackend::ExchangeSignatures(const OpContext& ctx,
                                             const OpSignature& mine,
                                             InlinePayload payload,
                                             absl::Span<OpSignature> all) {
  // Payloads up to inline_limit() ride along; every rank decides alike, from
  // the operation's size.
  inline_bytes_ = -1;
  const bool carried = payload.bytes <= CarryLimit(payload.spread);
  const size_t inline_bytes =
      carried && payload.data != nullptr ? payload.bytes : 0;
  std::memcpy(send_slot_.get(), &mine, sizeof(mine));
  if (inline_bytes > 0) {
    std::memcpy(send_slot_.get() + kHeaderBytes, payload.data, inline_bytes);
  }
  DK_RETURN_IF_ERROR(Guarded(ctx, [&](absl::Time deadline) {
    if (size_ > kDirectExchangeMaxRanks) {
      auto opts = OptionsFor<gloo::AllgatherOptions>(context_, ctx, deadline);
      opts.setInput(send_slot_.get(), slot_bytes_);
      opts.setOutput(recv_slots_.get(), slot_bytes_ * size_);
      gloo::allgather(opts);
      return;
    }
    const size_t message = kHeaderBytes + inline_bytes;
    std::memcpy(recv_slots_.get() + rank_ * slot_bytes_, send_slot_.get(),
                message);
    const uint64_t slot = gloo::Slot::build(kAgreeSlot, Tag(ctx));
    for (int peer = 0; peer < size_; ++peer) {
      if (peer != rank_)
        agree_recv_->recv(peer, slot, peer * slot_bytes_, slot_bytes_);
    }
    for (int peer = 0; peer < size_; ++peer) {
      if (peer != rank_) agree_send_->send(peer, slot, 0, message);
    }
    for (int i = 0; i < size_ - 1; ++i)
      Wait(*agree_recv_, /*recv=*/true, deadline);
    for (int i = 0; i < size_ - 1; ++i)
      Wait(*agree_send_, /*recv=*/false, deadline);
  }));
  for (int r = 0; r < size_; ++r) {
    std::memcpy(&all[r], recv_slots_.get() + r * slot_bytes_,
                sizeof(OpSignature));
  }
  if (carried) inline_bytes_ = static_cast<int64_t>(payload.bytes);
  return absl::OkStatus();
}

bool GlooBackend::TakeInline(size_t bytes) {
  const bool carried = inline_bytes_ == static_cast<int64_t>(bytes);
  inline_bytes_ = -1;
  return carried;
}

void GlooBackend::FoldInline(ReduceFn fn, TensorRef out, size_t offset) const {
  // Every rank folds the same records in rank order: identical results.
  if (out.numel() == 0) return;
  std::memcpy(out.data(), InlineData(0) + offset, out.nbytes());
  for (int r = 1; r < size_; ++r) {
    fn(out.data(), out.data(), InlineData(r) + offset, out.numel());
  }
}

size_t GlooBackend::inline_limit() const { return InlineLimit(size_); }

size_t GlooBackend::CarryLimit(bool spread) const {
  // Every peer gets the whole payload; where it needs 1/size of it (an
  // all_to_all), carried only while latency, not bytes, decides.
  return spread ? std::min(inline_limit(), kRingInlineBytes) : inline_limit();
}

const char* GlooBackend::InlineData(int rank) const {
  return recv_slots_.get() + rank * slot_bytes_ + kHeaderBytes;
}

absl::Status GlooBackend::AllReduce(const OpContext& ctx, TensorRef data,
                                    ReduceOp op) {
  DK_ASSIGN_OR_RETURN(ReduceFn fn, GetReduceFn(data.dtype(), op));
  if (TakeInline(data.nbytes())) {
    FoldInline(fn, data, 0);
    return absl::OkStatus();
  }
  if (size_ == 1) return absl::OkStatus();
  return Guarded(ctx, [&](absl::Time deadline) {
    auto opts = OptionsFor<gloo::AllreduceOptions>(context_, ctx, deadline);
    WithElementType(data.dtype(), data.data(),
                    [&](auto* p) { opts.setOutput(p, data.numel()); });
    opts.setReduceFunction(fn);
    gloo::allreduce(opts);
  });
}

absl::Status GlooBackend::Broadcast(const OpContext& ctx, TensorRef data,
                                    int root) {
  if (TakeInline(data.nbytes())) {
    if (rank_ != root)
      std::memcpy(data.data(), InlineData(root), data.nbytes());
    return absl::OkStatus();
  }
  return Guarded(ctx, [&](absl::Time deadline) {
    auto opts = OptionsFor<gloo::BroadcastOptions>(context_, ctx, deadline);
    opts.setOutput(static_cast<uint8_t*>(data.data()), data.nbytes());
    opts.setRoot(root);
    gloo::broadcast(opts);
  });
}

absl::Status GlooBackend::Reduce(const OpContext& ctx, TensorRef data,
                                 ReduceOp op, int root) {
  DK_ASSIGN_OR_RETURN(ReduceFn fn, GetReduceFn(data.dtype(), op));
  if (TakeInline(data.nbytes())) {
    if (rank_ == root) FoldInline(fn, data, 0);
    return absl::OkStatus();
  }
  if (size_ == 1) return absl::OkStatus();
  // Gloo's reduce uses the buffer as scratch on every rank; keep the
  // caller's data intact off the root, as torch does.
  void* buffer = data.data();
  if (rank_ != root) {
    scratch_.assign(static_cast<char*>(data.data()),
                    static_cast<char*>(data.data()) + data.nbytes());
    buffer = scratch_.data();
  }
  return Guarded(ctx, [&](absl::Time deadline) {
    auto opts = OptionsFor<gloo::ReduceOptions>(context_, ctx, deadline);
    WithElementType(data.dtype(), buffer,
                    [&](auto* p) { opts.setOutput(p, data.numel()); });
    opts.setReduceFunction(fn);
    opts.setRoot(root);
    gloo::reduce(opts);
  });
}

absl::Status GlooBackend::AllGather(const OpContext& ctx, TensorRef input,
                                    TensorRef output) {
  if (TakeInline(input.nbytes())) {
    for (int r = 0; r < size_; ++r) {
      std::memcpy(static_cast<char*>(output.data()) + r * input.nbytes(),
                  InlineData(r), input.nbytes());
    }
    return absl::OkStatus();
  }
  // Ring all_gather straight into the output: n-1 steps; at step s this
  // rank sends block (rank - s) to its right neighbour while it receives
  // block (rank - s - 1) from its left, both directions of each link busy
  // at once, and what it received at step s is what it sends at step s + 1.
  // Gloo's own allgather reached 0.73 of a 1 Gbit/s link between two hosts
  // (8 MiB: 46 ms against 33.5); this ring 0.9 when it took whole blocks,
  // and 0.96-0.99 at 2-4 hosts since each block goes in pieces (RingPieces),
  // each passed on as it arrives, with every receive posted a step ahead:
  // Gloo sends only into a receive its peer has announced, so a receive
  // posted when the step begins costs the link that announcement's trip at
  // every step.
  const size_t part = input.nbytes();
  char* out = static_cast<char*>(output.data());
  if (out + rank_ * part != input.data()) {
    std::memcpy(out + rank_ * part, input.data(), part);
  }
  if (size_ == 1 || part == 0) return absl::OkStatus();
  return Guarded(ctx, [&](absl::Time deadline) {
    auto buffer = context_->createUnboundBuffer(out, output.nbytes());
    const int right = (rank_ + 1) % size_;
    const int left = (rank_ - 1 + size_) % size_;
    const uint64_t slot = gloo::Slot::build(kAllGatherSlot, Tag(ctx));
    const RingPieces pieces(static_cast<int64_t>(part), 1);
    // Block received at step s (and sent at step s + 1).
    auto recv_block = [&](int s) {
      return ((rank_ - s - 1) % size_ + size_) % size_;
    };
    auto post_recvs = [&](int s) {
      for (int p = 0; p < pieces.count(); ++p) {
        buffer->recv(left, slot, recv_block(s) * part + pieces.begin(p),
                     pieces.size(p));
      }
    };
    post_recvs(0);
    for (int p = 0; p < pieces.count(); ++p) {
      buffer->send(right, slot, rank_ * part + pieces.begin(p), pieces.size(p));
    }
    int sends = pieces.count();
    for (int s = 0; s < size_ - 1; ++s) {
      const bool last = s == size_ - 2;
      if (!last) post_recvs(s + 1);
      for (int p = 0; p < pieces.count(); ++p) {
        Wait(*buffer, /*recv=*/true, deadline);
        if (last) continue;
        buffer->send(right, slot, recv_block(s) * part + pieces.begin(p),
                     pieces.size(p));
        ++sends;
      }
    }
    // What was sent is never written again here, so the sends are waited
    // for once, at the end.
    for (int i = 0; i < sends; ++i) Wait(*buffer, /*recv=*/false, deadline);
  });
}

absl::Status GlooBackend::Gather(const OpContext& ctx, TensorRef input,
                                 TensorRef output, int root) {
  if (TakeInline(input.nbytes())) {
    if (rank_ == root) {
      for (int r = 0; r < size_; ++r) {
        std::memcpy(static_cast<char*>(output.data()) + r * input.nbytes(),
                    InlineData(r), input.nbytes());
      }
    }
    return absl::OkStatus();
  }
  return Guarded(ctx, [&](absl::Time deadline) {
    auto opts = OptionsFor<gloo::GatherOptions>(context_, ctx, deadline);
    opts.setInput(static_cast<uint8_t*>(input.data()), input.nbytes());
    if (rank_ == root) {
      opts.setOutput(static_cast<uint8_t*>(output.data()),
                     input.nbytes() * size_);
    }
    opts.setRoot(root);
    gloo::gather(opts);
  });
}

absl::Status GlooBackend::Scatter(const OpContext& ctx, TensorRef input,
                                  TensorRef output, int root) {
  // Inline: the root's whole input rode in its signature record.
  if (TakeInline(output.nbytes() * size_)) {
    std::memcpy(output.data(), InlineData(root) + rank_ * output.nbytes(),
                output.nbytes());
    return absl::OkStatus();
  }
  return Guarded(ctx, [&](absl::Time deadline) {
    auto opts = OptionsFor<gloo::ScatterOptions>(context_, ctx, deadline);
    std::vector<uint8_t*> parts;
    if (rank_ == root) {
      for (int r = 0; r < size_; ++r) {
        parts.push_back(static_cast<uint8_t*>(input.data()) +
                        r * output.nbytes());
      }
      opts.setInputs(parts, output.nbytes());
    }
    opts.setOutput(static_cast<uint8_t*>(output.data()), output.nbytes());
    opts.setRoot(root);
    gloo::scatter(opts);
  });
}

absl::Status GlooBackend::ReduceScatter(const OpContext& ctx, TensorRef input,
                                        TensorRef output, ReduceOp op) {
  DK_ASSIGN_OR_RETURN(ReduceFn fn, GetReduceFn(output.dtype(), op));
  const size_t chunk = output.nbytes();
  if (TakeInline(input.nbytes())) {
    // Every rank has every input: fold this rank's chunk.
    FoldInline(fn, output, rank_ * chunk);
    return absl::OkStatus();
  }
  // Ring reduce-scatter: n-1 steps; at step s this rank sends chunk
  // (rank - s - 1) to its right neighbour and folds chunk (rank - s - 2)
  // from its left neighbour into its copy, which it sends at step s + 1.
  // It ends owning chunk `rank`. As in AllGather, each chunk goes in pieces
  // (a folded piece is sent on at once) and each step's receives are posted
  // a step ahead, into the other half of `incoming`.
  scratch_.assign(static_cast<char*>(input.data()),
                  static_cast<char*>(input.data()) + input.nbytes());
  if (size_ > 1 && chunk > 0) {
    if (ring_incoming_.size() < 2 * chunk) ring_incoming_.resize(2 * chunk);
    char* incoming = ring_incoming_.data();
    const size_t elem = ElementSize(output.dtype());
    const RingPieces pieces(output.numel(), elem);
    DK_RETURN_IF_ERROR(Guarded(ctx, [&](absl::Time deadline) {
      auto send_buf =
          context_->createUnboundBuffer(scratch_.data(), scratch_.size());
      auto recv_buf = context_->createUnboundBuffer(incoming, 2 * chunk);
      const int right = (rank_ + 1) % size_;
      const int left = (rank_ - 1 + size_) % size_;
      const uint64_t slot = gloo::Slot::build(kReduceScatterSlot, Tag(ctx));
      // Chunk folded at step s (and sent at step s + 1).
      auto recv_chunk = [&](int s) {
        return ((rank_ - s - 2) % size_ + size_) % size_;
      };
      auto post_recvs = [&](int s) {
        for (int p = 0; p < pieces.count(); ++p) {
          recv_buf->recv(left, slot, (s % 2) * chunk + pieces.begin(p) * elem,
                         pieces.size(p) * elem);
        }
      };
      auto send_piece = [&](int c, int p) {
        send_buf->send(right, slot, c * chunk + pieces.begin(p) * elem,
                       pieces.size(p) * elem);
      };
      post_recvs(0);
      for (int p = 0; p < pieces.count(); ++p) {
        send_piece(((rank_ - 1) % size_ + size_) % size_, p);
      }
      int sends = pieces.count();
      for (int s = 0; s < size_ - 1; ++s) {
        const bool last = s == size_ - 2;
        // Into the half that step s - 1 received into, all folded by now.
        if (!last) post_recvs(s + 1);
        for (int p = 0; p < pieces.count(); ++p) {
          Wait(*recv_buf, /*recv=*/true, deadline);
          const size_t at = pieces.begin(p) * elem;
          char* target = scratch_.data() + recv_chunk(s) * chunk + at;
          fn(target, target, incoming + (s % 2) * chunk + at, pieces.size(p));
          if (last) continue;
          send_piece(recv_chunk(s), p);
          ++sends;
        }
      }
      // A chunk is folded once and sent after it: the sends read what is
      // never written again, so they are waited for at the end.
      for (int i = 0; i < sends; ++i) Wait(*send_buf, /*recv=*/false, deadline);
    }));
  }
  std::memcpy(output.data(), scratch_.data() + rank_ * chunk, chunk);
  return absl::OkStatus();
}

absl::Status GlooBackend::AllToAll(const OpContext& ctx, TensorRef input,
                                   absl::Span<const int64_t> input_splits,
                                   TensorRef output,
                                   absl::Span<const int64_t> output_splits) {
  if (input_splits.empty() && output_splits.empty()) {
    // Inline: every rank's whole input rode in its signature record.
    if (TakeInline(input.nbytes())) {
      const size_t part = output.nbytes() / size_;
      for (int r = 0; r < size_; ++r) {
        std::memcpy(static_cast<char*>(output.data()) + r * part,
                    InlineData(r) + rank_ * part, part);
      }
      return absl::OkStatus();
    }
    return Guarded(ctx, [&](absl::Time deadline) {
      auto opts = OptionsFor<gloo::AlltoallOptions>(context_, ctx, deadline);
      opts.setInput(static_cast<uint8_t*>(input.data()), input.nbytes());
      opts.setOutput(static_cast<uint8_t*>(output.data()), output.nbytes());
      gloo::alltoall(opts);
    });
  }
  const size_t elem = ElementSize(input.dtype());
  return Guarded(ctx, [&](absl::Time deadline) {
    auto opts = OptionsFor<gloo::AlltoallvOptions>(context_, ctx, deadline);
    std::vector<int64_t> in_bytes(size_), out_bytes(size_);
    for (int r = 0; r < size_; ++r) {
      in_bytes[r] = input_splits[r] * elem;
      out_bytes[r] = output_splits[r] * elem;
    }
    opts.setInput(static_cast<uint8_t*>(input.data()), in_bytes);
    opts.setOutput(static_cast<uint8_t*>(output.data()), out_bytes);
    gloo::alltoallv(opts);
  });
}

// Messages between a pair with one tag share one slot and arrive in order
// (the contract's header, then the data). Waits go through Wait(), so
// Abort() ends a pending send or receive too.
absl::Status GlooBackend::Send(const OpContext& ctx, TensorRef data, int dst,
                               int tag) {
  return Guarded(
      ctx,
      [&](absl::Time deadline) {
        auto buffer = context_->createUnboundBuffer(data.data(), data.nbytes());
        buffer->send(dst, gloo::Slot::build(kPointToPointSlot,
                                            static_cast<uint32_t>(tag)));
        Wait(*buffer, /*recv=*/false, deadline);
      },
      dst);
}

absl::Status GlooBackend::Recv(const OpContext& ctx, TensorRef data, int src,
                               int tag) {
  return Guarded(
      ctx,
      [&](absl::Time deadline) {
        auto buffer = context_->createUnboundBuffer(data.data(), data.nbytes());
        buffer->recv(src, gloo::Slot::build(kPointToPointSlot,
                                            static_cast<uint32_t>(tag)));
        Wait(*buffer, /*recv=*/true, deadline);
      },
      src);
}

}  // namespace distkit
