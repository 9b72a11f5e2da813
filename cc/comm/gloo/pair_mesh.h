// PairMesh: the Gloo transport pairs among the ranks of one group, connected
// when they are first needed, with O(1) store round trips per rank.
//
// Gloo's own connectFullMesh costs every rank about 3(N - 1) store calls
// (3N^2 for the job) and opens N(N - 1)/2 TCP connections at group creation:
// at 256 ranks on one host that is 32,640 connections, past the ephemeral
// port range. Here a pair is connected
//  - for all peers at once (ConnectAll: one multi_set of this rank's pair
//    addresses, one multi_get of its peers'), when the group's first
//    operation that runs over Gloo needs the mesh (or at creation, for
//    groups that use Gloo for everything);
//  - for one peer (ConnectPair), by a send or receive: the peer connects the
//    same pair in its matching receive or send.
// A group on one host whose collectives all go through shared memory thus
// opens no TCP connection at all.
//
// Every wait is bounded: a peer that never publishes its address, or that
// accepts the connection but never answers the handshake (frozen), ends the
// connect with gloo::IoException ("timed out ...", naming the peer) at the
// deadline; an abort ends it at once. A pair whose connect failed is failed
// for good: every later ConnectPair or ConnectAll that needs it throws that
// first error again. It is never made anew: the thread of a handshake given
// up on may still be inside the old pair (Gloo's createPair would destroy
// it under that thread), and a group is unusable after such an error
// anyway. Threads: ConnectPair may be called from several threads (one lock
// per peer); ConnectAll is collective.

#ifndef DISTKIT_CC_COMM_GLOO_PAIR_MESH_H_
#define DISTKIT_CC_COMM_GLOO_PAIR_MESH_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cc/comm/rank_names.h"
#include "cc/store/store.h"

namespace gloo {
class Context;
namespace transport {
class Device;
}  // namespace transport
}  // namespace gloo

namespace distkit {

class PairMesh {
 public:
  // `store` should be private to the group (a PrefixStore); `names` says
  // how messages name the ranks.
  PairMesh(std::shared_ptr<Store> store, int rank, int size,
           std::shared_ptr<gloo::transport::Device> device,
           absl::Duration timeout, RankNames names = RankNames());
  ~PairMesh();

  // The Gloo context Gloo's algorithms and unbound buffers run on; a pair is
  // usable once connected.
  const std::shared_ptr<gloo::Context>& context() const { return context_; }

  // Collective: connects every pair not connected yet, within `timeout`.
  // Throws gloo::IoException on a timeout, a failed peer, when `aborted` is
  // set, or when a pair it needs failed before (that error again).
  void ConnectAll(absl::Duration timeout, const std::atomic<bool>& aborted);
  // Connects the pair to `peer` unless it is connected; `peer` must do the
  // same for this rank (its matching send or receive). Throws like
  // ConnectAll.
  void ConnectPair(int peer, absl::Duration timeout,
                   const std::atomic<bool>& aborted);

  // How many of this rank's size - 1 pairs are connected.
  int connected_pairs() const;

  // Ends every wait on the context's unbound buffers, those of Gloo's
  // algorithms included (they throw gloo::IoException), and makes every
  // later wait or post throw at once. Any thread; for good. Returns how many
  // buffers were alive.
  size_t AbortWaits();

  // Closes every connected pair: each peer's pending and later operations
  // on it fail at once, as when this rank dies (this rank's own waits end
  // only through AbortWaits()). Any thread; nothing of this rank may use the
  // mesh afterwards.
  void CloseAll();

 private:
  struct Peer {
    absl::Mutex mu;
    bool connected ABSL_GUARDED_BY(mu) = false;
    // Not empty once connecting the pair failed: what every later use
    // throws (the pair is never made again).
    std::string failed ABSL_GUARDED_BY(mu);
  };
  // Creates the pairs to `peers` (not connected), publishes their addresses
  // in one store call, reads the peers' in one, and connects them in rank
  // order. Every Peer::mu of `peers` is held by the caller; on failure it
  // marks every one of them failed.
  void Connect(const std::vector<int>& peers, absl::Duration timeout,
               const std::atomic<bool>& aborted);
  void ConnectOrFail(const std::vector<int>& peers, absl::Duration timeout,
                     const std::atomic<bool>& aborted);

  const std::shared_ptr<Store> store_;
  const int rank_;
  const int size_;
  const RankNames names_;
  std::shared_ptr<gloo::Context> context_;
  std::vector<std::unique_ptr<Peer>> peers_;
  std::atomic<int> connected_{0};
  absl::Mutex create_mu_;  // the transport context's pair table
};

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_GLOO_PAIR_MESH_H_
