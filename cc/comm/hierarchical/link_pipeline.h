// LinkPipeline: the cross-host stage of a hierarchical collective, chunk by
// chunk on a thread of its own, so that the link carries chunk k while the
// host's ranks prepare chunk k + 1 (a reduce or gather to the leader) and
// deliver chunk k - 1 (a broadcast or scatter from it). Across hosts the
// link is the bottleneck: any time it waits for a stage inside the host is
// lost (tools/dkbench/RESULTS.md, "Across real network hosts, second pass").
//
// The caller (the leader's operation thread) says when a chunk's input is in
// place (Ready, in chunk order) and waits for a chunk's result (Done). One
// chunk runs on the caller's thread, inside Ready: no thread for an
// operation that is not cut.

#ifndef DISTKIT_CC_COMM_HIERARCHICAL_LINK_PIPELINE_H_
#define DISTKIT_CC_COMM_HIERARCHICAL_LINK_PIPELINE_H_

#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace distkit {

class LinkPipeline {
 public:
  // `link(k)` moves chunk k, for k = 0 .. chunks - 1, each once Ready(k).
  LinkPipeline(int chunks, std::function<absl::Status(int)> link);
  // Stops the link before its next chunk and waits for the thread.
  ~LinkPipeline();

  LinkPipeline(const LinkPipeline&) = delete;
  LinkPipeline& operator=(const LinkPipeline&) = delete;

  // Chunk k's input is in place; chunks are made ready in order.
  void Ready(int k);
  // Waits until link(k) has finished: OK, or the link's first failure (at
  // chunk k or before it, after which no chunk moves).
  absl::Status Done(int k);
  // The caller's side failed: the link moves no further chunk, not even
  // one already made ready. A link call in progress is the caller's to end
  // (abort or disconnect the backend it runs on). Any thread.
  void Stop();

 private:
  void Run();

  const int chunks_;
  const std::function<absl::Status(int)> link_;
  absl::Mutex mu_;
  int ready_ ABSL_GUARDED_BY(mu_) = 0;  // chunks whose input is in place
  int done_ ABSL_GUARDED_BY(mu_) = 0;   // chunks moved
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);  // the link's first failure
  std::thread thread_;
};

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_HIERARCHICAL_LINK_PIPELINE_H_
