#include "cc/comm/gloo/pair_mesh.h"

#include <gloo/common/error.h>
#include <gloo/context.h>
#include <gloo/transport/context.h>
#include <gloo/transport/device.h>
#include <gloo/transport/pair.h>
#include <gloo/transport/unbound_buffer.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "cc/store/job_failure.h"

namespace distkit {
namespace {

// The unbound buffers alive on a mesh, for AbortWaits() to wake. Gloo's
// algorithms wait on buffers of their own, out of the caller's reach; every
// buffer is made through the mesh's transport context, which registers it.
class BufferRegistry {
 public:
  void Add(gloo::transport::UnboundBuffer* b) {
    absl::MutexLock lock(&mu_);
    live_.insert(b);
  }
  void Remove(gloo::transport::UnboundBuffer* b) {
    absl::MutexLock lock(&mu_);
    live_.erase(b);
  }
  // How many buffers were alive.
  size_t AbortAll() {
    absl::MutexLock lock(&mu_);
    aborted_ = true;
    for (gloo::transport::UnboundBuffer* b : live_) {
      b->abortWaitRecv();
      b->abortWaitSend();
    }
    return live_.size();
  }
  // Throws as Gloo does for a failed wait, so that an algorithm unwinds.
  void ThrowIfAborted() {
    if (aborted_.load()) throw gloo::IoException("the wait was aborted");
  }

 private:
  absl::Mutex mu_;
  absl::flat_hash_set<gloo::transport::UnboundBuffer*> live_
      ABSL_GUARDED_BY(mu_);
  std::atomic<bool> aborted_{false};
};

// Gloo's buffer, registered while it lives; after AbortWaits() its waits
// (and posts) throw instead of waiting. abortWait* reaches the inner
// buffer, whose flag a wait that starts later still sees.
class AbortableBuffer : public gloo::transport::UnboundBuffer {
 public:
  AbortableBuffer(std::shared_ptr<BufferRegistry> registry,
                  std::unique_ptr<gloo::transport::UnboundBuffer> inner)
      : UnboundBuffer(inner->ptr, inner->size),
        registry_(std::move(registry)),
        inner_(std::move(inner)) {
    registry_->Add(inner_.get());
  }
  ~AbortableBuffer() override { registry_->Remove(inner_.get()); }

  bool waitRecv(int* rank, std::chrono::milliseconds timeout) override {
    registry_->ThrowIfAborted();
    const bool done = inner_->waitRecv(rank, timeout);
    if (!done) registry_->ThrowIfAborted();
    return done;
  }
  bool waitSend(int* rank, std::chrono::milliseconds timeout) override {
    registry_->ThrowIfAborted();
    const bool done = inner_->waitSend(rank, timeout);
    if (!done) registry_->ThrowIfAborted();
    return done;
  }
  void abortWaitRecv() override { inner_->abortWaitRecv(); }
  void abortWaitSend() override { inner_->abortWaitSend(); }
  void send(int dst, uint64_t slot, size_t offset, size_t nbytes) override {
    registry_->ThrowIfAborted();
    inner_->send(dst, slot, offset, nbytes);
  }
  void recv(int src, uint64_t slot, size_t offset, size_t nbytes) override {
    registry_->ThrowIfAborted();
    inner_->recv(src, slot, offset, nbytes);
  }
  void recv(std::vector<int> srcs, uint64_t slot, size_t offset,
            size_t nbytes) override {
    registry_->ThrowIfAborted();
    inner_->recv(std::move(srcs), slot, offset, nbytes);
  }

 private:
  const std::shared_ptr<BufferRegistry> registry_;
  const std::unique_ptr<gloo::transport::UnboundBuffer> inner_;
};

// Gloo's transport context, whose unbound buffers are AbortableBuffers.
class AbortableTransport : public gloo::transport::Context {
 public:
  AbortableTransport(std::shared_ptr<gloo::transport::Context> inner,
                     std::shared_ptr<BufferRegistry> registry)
      : gloo::transport::Context(inner->rank, inner->size),
        inner_(std::move(inner)),
        registry_(std::move(registry)) {}

  std::unique_ptr<gloo::transport::Pair>& getPair(int rank) override {
    return inner_->getPair(rank);
  }
  std::unique_ptr<gloo::transport::Pair>& createPair(int rank) override {
    return inner_->createPair(rank);
  }
  std::unique_ptr<gloo::transport::UnboundBuffer> createUnboundBuffer(
      void* ptr, size_t size) override {
    return std::make_unique<AbortableBuffer>(
        registry_, inner_->createUnboundBuffer(ptr, size));
  }

 private:
  const std::shared_ptr<gloo::transport::Context> inner_;
  const std::shared_ptr<BufferRegistry> registry_;
};

// A gloo::Context whose transport context exists from the start and gets
// its pairs one by one (Gloo's rendezvous::Context creates all of them in
// connectFullMesh), and whose buffers' waits AbortWaits() ends.
class MeshContext : public gloo::Context {
 public:
  MeshContext(int rank, int size,
              std::shared_ptr<gloo::transport::Device> device,
              std::chrono::milliseconds timeout)
      : gloo::Context(rank, size) {
    device_ = std::move(device);
    inner_ = device_->createContext(rank, size);
    setTimeout(timeout);
    inner_->setTimeout(timeout);
    transportContext_ = std::make_shared<AbortableTransport>(inner_, registry_);
  }
  gloo::transport::Context& transport() { return *inner_; }
  BufferRegistry& registry() { return *registry_; }

 private:
  std::shared_ptr<gloo::transport::Context> inner_;
  const std::shared_ptr<BufferRegistry> registry_ =
      std::make_shared<BufferRegistry>();
};

std::chrono::milliseconds Millis(absl::Duration d) {
  return std::chrono::milliseconds(
      std::max<int64_t>(1, absl::ToInt64Milliseconds(d)));
}

std::string PairKey(int from, int to) {
  return absl::StrCat("pair/", from, "/", to);
}

[[noreturn]] void ThrowAborted() {
  throw gloo::IoException("aborted while connecting to peers");
}

// Reads `keys`, waiting for them within `timeout` in short slices so an
// abort is noticed promptly.
// `peers` names them for messages.
std::vector<std::string> WaitForAddresses(Store& store,
                                          const std::vector<std::string>& keys,
                                          absl::string_view peers,
                                          absl::Duration timeout,
                                          const std::atomic<bool>& aborted) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    if (aborted.load()) ThrowAborted();
    const absl::Duration left = deadline - absl::Now();
    absl::StatusOr<std::vector<std::string>> values = store.MultiGetWithTimeout(
        keys, std::max(absl::Milliseconds(1),
                       std::min(left, absl::Milliseconds(200))));
    if (values.ok()) return *std::move(values);
    if (absl::IsDeadlineExceeded(values.status()) && absl::Now() >= deadline) {
      // The store's message would name keys in this backend's numbering.
      throw gloo::IoException(
          absl::StrCat("timed out after ", absl::FormatDuration(timeout),
                       " waiting for the address of ", peers));
    }
    if (!absl::IsDeadlineExceeded(values.status())) {
      throw gloo::IoException(
          absl::StrCat("reading the address of ", peers,
                       " failed: ", values.status().ToString()));
    }
  }
}

// Gloo's Pair::connect waits far longer than the operation may (5 times
// the pair's timeout) for a peer that published its address but never
// completes the connection (frozen, or overloaded). So `connect` runs on a
// thread of its own, owning what it touches; if it has not finished by
// `deadline` (or the group is aborted), this rank gives up and the thread
// ends with the process, or when the peer answers or dies: the pairs it
// connects must then never be made again (PairMesh::Peer::failed).
// While it waits, it looks every 50 ms at whether the job failed (a peer it
// waits for died: job_failure.h): Gloo would wait for that peer's connection
// until the timeout. `waiting_for` names the peer the thread is at.
void ConnectWithin(std::function<void()> connect, absl::Duration timeout,
                   absl::Time deadline, const std::atomic<bool>& aborted,
                   Store& store,
                   const std::function<std::string()>& waiting_for) {
  struct Outcome {
    absl::Mutex mu;
    bool done ABSL_GUARDED_BY(mu) = false;
    std::exception_ptr error ABSL_GUARDED_BY(mu);
  };
  auto outcome = std::make_shared<Outcome>();
  std::thread([outcome, connect = std::move(connect)] {
    std::exception_ptr error;
    try {
      connect();
    } catch (...) {
      error = std::current_exception();
    }
    absl::MutexLock lock(&outcome->mu);
    outcome->error = error;
    outcome->done = true;
  }).detach();
  absl::MutexLock lock(&outcome->mu);
  while (!outcome->done && absl::Now() < deadline && !aborted.load()) {
    if (outcome->mu.AwaitWithTimeout(
            absl::Condition(&outcome->done),
            std::min(absl::Milliseconds(50), deadline - absl::Now()))) {
      break;
    }
    outcome->mu.Unlock();
    std::optional<std::string> failed = JobFailureNow(store);
    outcome->mu.Lock();
    if (failed.has_value() && !outcome->done) {
      // "the job failed: " first, as the store says it (job_failure.h).
      throw gloo::IoException(absl::StrCat("the job failed: ", *failed,
                                           " (while connecting to ",
                                           waiting_for(), ")"));
    }
  }
  if (!outcome->done) {
    if (aborted.load()) ThrowAborted();
    throw gloo::IoException(absl::StrCat(
        "timed out after ", absl::FormatDuration(timeout),
        " in the connection handshake with ", waiting_for(),
        " (it published its address but never completed the connection: "
        "frozen or overloaded)"));
  }
  if (outcome->error) std::rethrow_exception(outcome->error);
}

}  // namespace

PairMesh::PairMesh(std::shared_ptr<Store> store, int rank, int size,
                   std::shared_ptr<gloo::transport::Device> device,
                   absl::Duration timeout, RankNames names)
    : store_(std::move(store)),
      rank_(rank),
      size_(size),
      names_(std::move(names)),
      context_(std::make_shared<MeshContext>(rank, size, std::move(device),
                                             Millis(timeout))) {
  for (int r = 0; r < size; ++r) peers_.push_back(std::make_unique<Peer>());
}

PairMesh::~PairMesh() = default;

int PairMesh::connected_pairs() const { return connected_.load(); }

size_t PairMesh::AbortWaits() {
  return static_cast<MeshContext&>(*context_).registry().AbortAll();
}

void PairMesh::CloseAll() {
  auto& transport = static_cast<MeshContext&>(*context_).transport();
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    // The order Connect takes them in: the peer's, then the pair table's.
    absl::MutexLock lock(&peers_[p]->mu);
    if (!peers_[p]->connected) continue;
    absl::MutexLock table(&create_mu_);
    try {
      transport.getPair(p)->close();
    } catch (const std::exception&) {
      // Already failed: the peer has learned of it, or will at once.
    }
  }
}

void PairMesh::ConnectAll(absl::Duration timeout,
                          const std::atomic<bool>& aborted) {
  if (connected_.load() == size_ - 1) return;
  // Every peer's lock, in rank order (ConnectPair takes one of them).
  std::vector<std::unique_ptr<absl::MutexLock>> locks;
  std::vector<int> missing;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    locks.push_back(std::make_unique<absl::MutexLock>(&peers_[p]->mu));
    if (!peers_[p]->failed.empty()) {
      throw gloo::IoException(peers_[p]->failed);
    }
    if (!peers_[p]->connected) missing.push_back(p);
  }
  if (missing.empty()) return;
  ConnectOrFail(missing, timeout, aborted);
}

void PairMesh::ConnectPair(int peer, absl::Duration timeout,
                           const std::atomic<bool>& aborted) {
  Peer& p = *peers_[peer];
  absl::MutexLock lock(&p.mu);
  if (p.connected) return;
  // Another thread's connect to this peer failed while this one waited for
  // the lock (or before): its handshake thread may still be inside the pair.
  if (!p.failed.empty()) throw gloo::IoException(p.failed);
  ConnectOrFail({peer}, timeout, aborted);
}

void PairMesh::ConnectOrFail(const std::vector<int>& peers,
                             absl::Duration timeout,
                             const std::atomic<bool>& aborted) {
  try {
    Connect(peers, timeout, aborted);
  } catch (const std::exception& e) {
    // For good: every later use of these pairs gets this error, and none is
    // made again (ConnectWithin).
    for (int p : peers) {
      peers_[p]->mu.AssertHeld();
      peers_[p]->failed = absl::StrCat("connecting to ", names_.Rank(p),
                                       " failed earlier: ", e.what());
    }
    throw;
  }
  for (int p : peers) {
    peers_[p]->mu.AssertHeld();
    peers_[p]->connected = true;
  }
}

void PairMesh::Connect(const std::vector<int>& peers, absl::Duration timeout,
                       const std::atomic<bool>& aborted) {
  const absl::Time deadline = absl::Now() + timeout;
  auto& transport = static_cast<MeshContext&>(*context_).transport();
  std::vector<std::string> mine, addresses, theirs;
  {
    absl::MutexLock lock(&create_mu_);
    for (int p : peers) {
      std::vector<char> bytes = transport.createPair(p)->address().bytes();
      mine.push_back(PairKey(rank_, p));
      addresses.emplace_back(bytes.begin(), bytes.end());
      theirs.push_back(PairKey(p, rank_));
    }
  }
  absl::Status published = store_->MultiSet(mine, addresses);
  if (!published.ok()) {
    throw gloo::IoException(absl::StrCat(
        "publishing this rank's addresses failed: ", published.ToString()));
  }
  std::vector<std::string> named;
  for (int p : peers) named.push_back(names_.Rank(p));
  std::vector<std::string> peer_addresses = WaitForAddresses(
      *store_, theirs, absl::StrJoin(named, ", "), timeout, aborted);
  // In rank order on every rank, as Gloo's own full mesh does. `at`: the
  // index of the peer the thread is connecting, for messages.
  std::shared_ptr<gloo::Context> context = context_;
  auto at = std::make_shared<std::atomic<size_t>>(0);
  ConnectWithin(
      [context, peers, peer_addresses, at] {
        auto& t = static_cast<MeshContext&>(*context).transport();
        for (size_t i = 0; i < peers.size(); ++i) {
          at->store(i);
          t.getPair(peers[i])->connect(std::vector<char>(
              peer_addresses[i].begin(), peer_addresses[i].end()));
        }
      },
      // A few milliseconds at least: a handshake that is done at once (this
      // rank dials) is not failed for the time the store took.
      timeout, std::max(deadline, absl::Now() + absl::Milliseconds(5)), aborted,
      *store_,
      [&] {
        return names_.Rank(peers[std::min(at->load(), peers.size() - 1)]);
      });
  connected_ += static_cast<int>(peers.size());
}

}  // namespace distkit
