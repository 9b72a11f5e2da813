// HierarchicalBackend's all_reduce, all_gather and reduce_scatter cut into
// chunks (chunk_plan.h), the leader's link stage on a thread of its own
// (link_pipeline.h): the host's ranks reduce or gather chunk k + 1 and
// receive chunk k - 1 while the leaders move chunk k across hosts. Every
// rank of a host calls the same shared-memory operations in the same order:
// stage-in(0), then for each k: stage-in(k + 1), stage-out(k); a leader's
// stage-out(k) waits for the link's chunk k.

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "cc/comm/hierarchical/chunk_plan.h"
#include "cc/comm/hierarchical/hierarchical_backend.h"
#include "cc/comm/hierarchical/link_pipeline.h"
#include "cc/core/status.h"

namespace distkit {
namespace {

// DISTKIT_TEST_LINK_PAUSE_MS (tests only): the first host's leader
// (DISTKIT_TEST_LINK_PAUSE_HOST: that host's) pauses this long before each
// chunk it moves, so that the others wait inside the link's stage when a
// test aborts the operation, or the link is slow when the operation's
// deadline passes. A slow link's wait would end there: so does the pause.
struct TestLinkPause {
  absl::Duration pause;
  int host = 0;
};

const TestLinkPause& TestLinkPauseFromEnv() {
  static const TestLinkPause pause = [] {
    TestLinkPause p;
    const char* value = std::getenv("DISTKIT_TEST_LINK_PAUSE_MS");
    int ms = 0;
    if (value != nullptr && absl::SimpleAtoi(value, &ms) && ms > 0) {
      p.pause = absl::Milliseconds(ms);
    }
    const char* host = std::getenv("DISTKIT_TEST_LINK_PAUSE_HOST");
    if (host != nullptr && !absl::SimpleAtoi(host, &p.host)) p.host = 0;
    return p;
  }();
  return pause;
}

void PauseLink(int host, const OpContext& ctx) {
  const TestLinkPause& test = TestLinkPauseFromEnv();
  if (host != test.host || test.pause <= absl::ZeroDuration()) return;
  absl::SleepFor(std::min(test.pause, ctx.deadline - absl::Now()));
}

}  // namespace

absl::Status HierarchicalBackend::LocalStage(const OpContext& ctx,
                                             LinkPipeline& link,
                                             absl::Status status) {
  status = Stage(ctx, std::move(status));
  if (!status.ok() && leader()) {
    // The link moves no further chunk. A failure has closed the leaders'
    // connections in Stage, and an abort aborted them, which ends the link
    // thread's Gloo call; after a timeout that call reaches the same
    // deadline by itself, and the other hosts are left to theirs and to
    // their diagnosis (an abort here would close the connections under
    // them: GlooBackend::Abort during an operation).
    link.Stop();
  }
  return status;
}

absl::Status HierarchicalBackend::PipelinedAllReduce(const OpContext& ctx,
                                                     TensorRef data,
                                                     ReduceOp op,
                                                     const ChunkPlan& plan) {
  const size_t elem = ElementSize(data.dtype());
  char* base = static_cast<char*>(data.data());
  auto chunk = [&](int k) {
    return TensorRef(base + plan.begin(k) * elem, plan.size(k), data.dtype());
  };
  const int n = plan.chunks();
  LinkPipeline link(leader() ? n : 0, [&](int k) {
    PauseLink(host_, ctx);
    return Stage(ctx, leaders_->AllReduce(ctx, chunk(k), op));
  });
  const ActiveLink active(this, &link);  // for Abort() to stop
  for (int k = 0; k <= n; ++k) {
    if (k < n) {
      if (local_) {
        DK_RETURN_IF_ERROR(
            LocalStage(ctx, link, local_->Reduce(ctx, chunk(k), op, 0)));
      }
      if (leader()) link.Ready(k);
    }
    if (k > 0) {
      if (leader()) DK_RETURN_IF_ERROR(IfAborted(ctx, link.Done(k - 1)));
      if (local_) {
        DK_RETURN_IF_ERROR(
            LocalStage(ctx, link, local_->Broadcast(ctx, chunk(k - 1), 0)));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status HierarchicalBackend::PipelinedAllGather(const OpContext& ctx,
                                                     TensorRef input,
                                                     TensorRef output,
                                                     const ChunkPlan& plan) {
  // Bytes: chunk k is bytes [begin(k), begin(k + 1)) of every rank's part.
  const size_t part = input.nbytes();
  const int hosts = hosts_.hosts();
  const size_t most = MostLocalRanks();
  const size_t local_size = hosts_.ranks[host_].size();
  const size_t widest = plan.most();
  // Two of each, used in turn: the leader gathers chunk k + 1 while the
  // link still reads chunk k, and delivers chunk k - 1 while the link
  // writes chunk k. `block`: this host's ranks' slices (zero-padded to the
  // largest host's count); `all`: every host's block, host order.
  const size_t block_bytes = most * widest;
  const size_t all_bytes = hosts * block_bytes;
  const size_t need = 2 * (block_bytes + all_bytes);
  if (scratch_.size() < need) scratch_.resize(need);
  auto block = [&](int k) { return scratch_.data() + (k % 2) * block_bytes; };
  auto all = [&](int k) {
    return scratch_.data() + 2 * block_bytes + (k % 2) * all_bytes;
  };
  const char* in = static_cast<const char*>(input.data());
  char* out = static_cast<char*>(output.data());
  const int n = plan.chunks();
  LinkPipeline link(leader() ? n : 0, [&](int k) {
    PauseLink(host_, ctx);
    const size_t len = plan.size(k);
    return Stage(ctx,
                 leaders_->AllGather(
                     ctx, TensorRef(block(k), most * len, DataType::kUInt8),
                     TensorRef(all(k), hosts * most * len, DataType::kUInt8)));
  });
  const ActiveLink active(this, &link);  // for Abort() to stop
  for (int k = 0; k <= n; ++k) {
    if (k < n) {
      const size_t len = plan.size(k);
      if (local_) {
        DK_RETURN_IF_ERROR(LocalStage(
            ctx, link,
            local_->Gather(
                ctx,
                TensorRef(const_cast<char*>(in) + plan.begin(k), len,
                          DataType::kUInt8),
                TensorRef(block(k), local_size * len, DataType::kUInt8), 0)));
      } else {
        std::memcpy(block(k), in + plan.begin(k), len);
      }
      if (leader()) link.Ready(k);
    }
    if (k > 0) {
      const int j = k - 1;
      const size_t len = plan.size(j);
      if (leader()) DK_RETURN_IF_ERROR(IfAborted(ctx, link.Done(j)));
      if (local_) {
        DK_RETURN_IF_ERROR(LocalStage(
            ctx, link,
            local_->Broadcast(
                ctx, TensorRef(all(j), hosts * most * len, DataType::kUInt8),
                0)));
      }
      for (int h = 0; h < hosts; ++h) {
        const std::vector<int>& ranks = hosts_.ranks[h];
        for (size_t i = 0; i < ranks.size(); ++i) {
          std::memcpy(out + ranks[i] * part + plan.begin(j),
                      all(j) + (h * most + i) * len, len);
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status HierarchicalBackend::PipelinedReduceScatter(
    const OpContext& ctx, TensorRef input, TensorRef output, ReduceOp op,
    const ChunkPlan& plan) {
  // Elements: chunk k is elements [begin(k), begin(k + 1)) of every rank's
  // part. Each rank packs its input's chunk host by host (the host's ranks'
  // slices, zero-padded to the largest host's count); the host reduces the
  // pack to its leader, the leaders reduce-scatter the packs' host blocks
  // (each link carries hosts - 1 blocks) and each leader scatters its
  // host's block to the host's ranks. Two of each buffer, used in turn (see
  // PipelinedAllGather). The input stays as it was.
  const DataType dtype = output.dtype();
  const size_t elem = ElementSize(dtype);
  const int64_t part = output.numel();
  const int hosts = hosts_.hosts();
  const size_t most = MostLocalRanks();
  const size_t local_size = hosts_.ranks[host_].size();
  const size_t widest = plan.most() * elem;
  const size_t pack_bytes = hosts * most * widest;
  const size_t block_bytes = most * widest;
  const size_t need = 2 * (pack_bytes + block_bytes);
  if (scratch_.size() < need) scratch_.resize(need);
  auto pack = [&](int k) { return scratch_.data() + (k % 2) * pack_bytes; };
  auto block = [&](int k) {
    return scratch_.data() + 2 * pack_bytes + (k % 2) * block_bytes;
  };
  const char* in = static_cast<const char*>(input.data());
  char* out = static_cast<char*>(output.data());
  const int n = plan.chunks();
  LinkPipeline link(leader() ? n : 0, [&](int k) {
    PauseLink(host_, ctx);
    const int64_t len = plan.size(k);
    return Stage(ctx, leaders_->ReduceScatter(
                          ctx, TensorRef(pack(k), hosts * most * len, dtype),
                          TensorRef(block(k), most * len, dtype), op));
  });
  const ActiveLink active(this, &link);  // for Abort() to stop
  for (int k = 0; k <= n; ++k) {
    if (k < n) {
      const size_t len = plan.size(k) * elem;
      char* p = pack(k);
      for (int h = 0; h < hosts; ++h) {
        const std::vector<int>& ranks = hosts_.ranks[h];
        for (size_t i = 0; i < most; ++i) {
          char* slot = p + (h * most + i) * len;
          if (i < ranks.size()) {
            std::memcpy(slot, in + (ranks[i] * part + plan.begin(k)) * elem,
                        len);
          } else {
            std::memset(slot, 0, len);  // never read: no host rank's
          }
        }
      }
      if (local_) {
        DK_RETURN_IF_ERROR(LocalStage(
            ctx, link,
            local_->Reduce(
                ctx, TensorRef(p, hosts * most * plan.size(k), dtype), op, 0)));
      }
      if (leader()) link.Ready(k);
    }
    if (k > 0) {
      const int j = k - 1;
      if (leader()) DK_RETURN_IF_ERROR(IfAborted(ctx, link.Done(j)));
      const TensorRef mine(out + plan.begin(j) * elem, plan.size(j), dtype);
      if (local_) {
        DK_RETURN_IF_ERROR(LocalStage(
            ctx, link,
            local_->Scatter(
                ctx, TensorRef(block(j), local_size * plan.size(j), dtype),
                mine, 0)));
      } else {
        std::memcpy(mine.data(), block(j), mine.nbytes());
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace distkit
