// dkgpusim's NCCL enforces NCCL's rules and turns failures into errors, not
// hangs: one thread per communicator, one rank per device, mismatched
// collectives hang until aborted, abort unblocks, a dead or aborted peer
// becomes an async error, and the DKSIM_NCCL_* fault knobs.

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "testing/gpu_sim/sim_test_util.h"

namespace dksim_test {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// A communicator of n ranks on devices 0..n-1 and a non-blocking stream.
struct Rank {
  const Api* api = nullptr;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  int* buf = nullptr;  // 64 ints
};

bool JoinComm(int rank, int n, Board* board, Rank* out) {
  const Api& api = Load();
  out->api = &api;
  return InitComm(api, board, rank, n, &out->comm) &&
         api.cudaStreamCreateWithFlags(&out->stream, cudaStreamNonBlocking) ==
             cudaSuccess &&
         api.cudaMalloc(reinterpret_cast<void**>(&out->buf), 256) ==
             cudaSuccess &&
         api.cudaMemset(out->buf, 0, 256) == cudaSuccess &&
         api.cudaDeviceSynchronize() == cudaSuccess;
}

// Runs body(rank, k, board) in n children, each joined first to one
// communicator of n ranks; the board's flags serve their handshakes.
std::vector<ChildResult> RunJoined(
    int n, const std::function<int(int, Rank&, Board*)>& body,
    const Env& env = {}) {
  Board* board = NewBoard();
  auto results = RunChildren(
      n,
      [&](int rank) {
        Rank k;
        SIM_CHECK(JoinComm(rank, n, board, &k));
        return body(rank, k, board);
      },
      env);
  munmap(board, sizeof(Board));
  return results;
}

// One rank on device 0, as RunJoined.
ChildResult RunJoinedAlone(const std::function<int(Rank&)>& body) {
  return RunJoined(1, [&](int, Rank& k, Board*) { return body(k); })[0];
}

// Whether k's stream is still busy ms after the call (a hung operation).
bool StillBusyAfter(const Rank& k, int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return k.api->cudaStreamQuery(k.stream) == cudaErrorNotReady;
}

// Waits (bounded) for the async error to leave ncclSuccess.
ncclResult_t AsyncErrorWithin(const Api& api, ncclComm_t comm, int ms) {
  ncclResult_t a = ncclSuccess;
  WaitUntil(
      [&] {
        api.ncclCommGetAsyncError(comm, &a);
        return a != ncclSuccess && a != ncclInProgress;
      },
      ms);
  return a;
}

TEST(SimNcclFaults, ConcurrentCallsOnOneCommunicatorAbort) {
  auto r = RunJoinedAlone([&](Rank& k) {
    const Api& api = *k.api;
    std::atomic<bool> holding{false};
    // This thread's open group holds the communicator...
    std::thread t([&] {
      api.ncclGroupStart();
      api.ncclAllReduce(k.buf, k.buf, 4, ncclInt32, ncclSum, k.comm, k.stream);
      holding.store(true);
      std::this_thread::sleep_for(std::chrono::seconds(10));
      api.ncclGroupEnd();
    });
    SIM_CHECK(WaitUntil([&] { return holding.load(); }, 5000));
    // ... so this call from another thread is caught.
    api.ncclAllReduce(k.buf, k.buf, 4, ncclInt32, ncclSum, k.comm, k.stream);
    t.join();
    return 0;
  });
  EXPECT_TRUE(r.KilledBy(SIGABRT)) << r.Describe();
  EXPECT_NE(r.err.find("dkgpusim: ncclAllReduce on communicator"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("while thread"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("is inside ncclAllReduce"), std::string::npos) << r.err;
}

TEST(SimNcclFaults, AbortAndAsyncErrorAreSafeFromAnotherThread) {
  auto r = RunJoinedAlone([&](Rank& k) {
    const Api& api = *k.api;
    std::atomic<bool> holding{false}, release{false};
    std::thread t([&] {
      api.ncclGroupStart();
      api.ncclAllReduce(k.buf, k.buf, 4, ncclInt32, ncclSum, k.comm, k.stream);
      holding.store(true);
      WaitUntil([&] { return release.load(); }, 5000);
      api.ncclGroupEnd();
    });
    SIM_CHECK(WaitUntil([&] { return holding.load(); }, 5000));
    ncclResult_t a;
    SIM_NCCL(api.ncclCommGetAsyncError(k.comm, &a));
    SIM_NCCL(api.ncclCommAbort(k.comm));
    release.store(true);
    t.join();
    SIM_CUDA(api.cudaStreamSynchronize(k.stream));
    // Later calls on the aborted communicator fail.
    SIM_CHECK(api.ncclAllReduce(k.buf, k.buf, 4, ncclInt32, ncclSum, k.comm,
                                k.stream) == ncclInvalidUsage);
    return 0;
  });
  EXPECT_TRUE(r.ExitedWith(0)) << r.Describe();
}

TEST(SimNcclFaults, TwoRanksOnOneDeviceAreRefused) {
  Board* board = NewBoard();
  auto results = RunChildren(2, [&](int rank) {
    const Api& api = Load();
    SIM_CUDA(api.cudaSetDevice(0));
    ncclUniqueId id;
    SIM_CHECK(ShareId(api, board, rank, 0, &id));
    ncclComm_t comm = nullptr;
    SIM_CHECK(api.ncclCommInitRank(&comm, 2, id, rank) == ncclInvalidUsage);
    return 0;
  });
  munmap(board, sizeof(Board));
  for (const auto& r : results) {
    EXPECT_TRUE(r.ExitedWith(0)) << r.Describe();
    EXPECT_NE(r.err.find("are both on CUDA device 0"), std::string::npos)
        << r.err;
  }
}

// The /dev/shm segment a communicator's ranks meet in (named after its id,
// sim_nccl.cc; unlinked once every rank is in).
std::string SegmentOf(const ncclUniqueId& id) {
  std::string path = "/dev/shm/dkgpusim-";
  for (int i = 8; i < 24; ++i) {
    char hex[3];
    std::snprintf(hex, sizeof(hex), "%02x",
                  static_cast<unsigned char>(id.internal[i]));
    path += hex;
  }
  return path;
}

bool Exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

// An initialization that fails before every rank is in (here rank 1 never
// comes, rank 0 aborts and its process exits at once, before the
// initialization's own thread sees the abort) leaves no segment behind.
TEST(SimNcclFaults, AnAbortedInitLeavesNoSegment) {
  Board* board = NewBoard();
  auto results = RunChildren(1, [&](int) {
    const Api& api = Load();
    SIM_CUDA(api.cudaSetDevice(0));
    ncclUniqueId id;
    SIM_CHECK(ShareId(api, board, 0, 0, &id));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    SIM_CHECK(api.ncclCommInitRankConfig(&comm, 2, id, 0, &config) ==
              ncclInProgress);
    SIM_CHECK(WaitUntil([&] { return Exists(SegmentOf(id)); }, 5000));
    SIM_NCCL(api.ncclCommAbort(comm));
    return 0;  // exits now
  });
  EXPECT_TRUE(results[0].ExitedWith(0)) << results[0].Describe();
  EXPECT_FALSE(Exists(SegmentOf(board->ids[0])));
  munmap(board, sizeof(Board));
}

// A second process claiming a rank is refused without unlinking the
// segment the first one waits in: the communicator's real ranks still meet.
TEST(SimNcclFaults, ASecondClaimOfARankLeavesTheRanksToMeet) {
  Board* board = NewBoard();
  auto results = RunChildren(3, [&](int child) {
    const Api& api = Load();
    ncclUniqueId id;
    SIM_CHECK(ShareId(api, board, child == 0 ? 0 : 1, 0, &id));
    ncclComm_t comm = nullptr;
    if (child == 0) {  // rank 0, waits for rank 1
      SIM_CUDA(api.cudaSetDevice(0));
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      config.blocking = 0;
      SIM_CHECK(api.ncclCommInitRankConfig(&comm, 2, id, 0, &config) ==
                ncclInProgress);
      SIM_CHECK(WaitUntil([&] { return Exists(SegmentOf(id)); }, 5000));
      board->flags[0].store(1);
      ncclResult_t a = ncclInProgress;
      SIM_CHECK(WaitUntil(
          [&] {
            api.ncclCommGetAsyncError(comm, &a);
            return a != ncclInProgress;
          },
          10000));
      SIM_CHECK(a == ncclSuccess);
    } else if (child == 1) {  // claims rank 0 again
      SIM_CHECK(WaitUntil([&] { return board->flags[0].load() == 1; }, 10000));
      SIM_CUDA(api.cudaSetDevice(0));
      SIM_CHECK(api.ncclCommInitRank(&comm, 2, id, 0) == ncclInvalidUsage);
      board->flags[1].store(1);
      return 0;
    } else {  // rank 1, after the refused claim
      SIM_CHECK(WaitUntil([&] { return board->flags[1].load() == 1; }, 10000));
      SIM_CUDA(api.cudaSetDevice(1));
      SIM_NCCL(api.ncclCommInitRank(&comm, 2, id, 1));
    }
    SIM_NCCL(api.ncclCommDestroy(comm));
    return 0;
  });
  for (const auto& r : results) EXPECT_TRUE(r.ExitedWith(0)) << r.Describe();
  EXPECT_NE(results[1].err.find("initialized twice"), std::string::npos)
      << results[1].err;
  munmap(board, sizeof(Board));
}

TEST(SimNcclFaults, AbortUnblocksAWaitingOperation) {
  auto results = RunJoined(2, [&](int rank, Rank& k, Board* board) {
    const Api& api = *k.api;
    if (rank == 1) {
      // Never joins the all-reduce; leaves once rank 0 is through.
      SIM_CHECK(WaitUntil([&] { return board->flags[0].load() == 1; }, 10000));
      SIM_NCCL(api.ncclCommDestroy(k.comm));
      return 0;
    }
    SIM_NCCL(api.ncclAllReduce(k.buf, k.buf, 4, ncclInt32, ncclSum, k.comm,
                               k.stream));
    SIM_CHECK(StillBusyAfter(k, 200));
    const auto start = Clock::now();
    std::thread aborter([&] { api.ncclCommAbort(k.comm); });
    SIM_CUDA(api.cudaStreamSynchronize(k.stream));
    aborter.join();
    SIM_CHECK(SecondsSince(start) < 2);
    ncclResult_t a = ncclSuccess;
    SIM_NCCL(api.ncclCommGetAsyncError(k.comm, &a));
    SIM_CHECK(a != ncclSuccess);
    board->flags[0].store(1);
    return 0;
  });
  for (const auto& r : results) EXPECT_TRUE(r.ExitedWith(0)) << r.Describe();
}

TEST(SimNcclFaults, ADeadPeerBecomesAnAsyncError) {
  auto results = RunJoined(
      3,
      [&](int, Rank& k, Board*) {
        const Api& api = *k.api;
        // Rank 1 exits at its second operation (DKSIM_NCCL_DIE_*).
        for (int i = 0; i < 2; ++i) {
          SIM_NCCL(api.ncclAllReduce(k.buf, k.buf, 4, ncclInt32, ncclSum,
                                     k.comm, k.stream));
        }
        const auto start = Clock::now();
        SIM_CHECK(AsyncErrorWithin(api, k.comm, 5000) == ncclRemoteError);
        SIM_CHECK(SecondsSince(start) < 3);
        // The failed operation's stream work completed.
        SIM_CUDA(api.cudaStreamSynchronize(k.stream));
        SIM_NCCL(api.ncclCommAbort(k.comm));
        return 0;
      },
      {{"DKSIM_DEVICES", "3"},
       {"DKSIM_NCCL_DIE_RANK", "1"},
       {"DKSIM_NCCL_DIE_AT", "2"}});
  EXPECT_TRUE(results[0].ExitedWith(0)) << results[0].Describe();
  EXPECT_TRUE(results[1].ExitedWith(1)) << results[1].Describe();
  EXPECT_TRUE(results[2].ExitedWith(0)) << results[2].Describe();
  EXPECT_NE(results[1].err.find("DKSIM_NCCL_DIE_RANK"), std::string::npos);
  EXPECT_NE(results[0].err.find("(pid "), std::string::npos);
}

TEST(SimNcclFaults, MismatchedCollectivesHangUntilAborted) {
  auto results = RunJoined(2, [&](int rank, Rank& k, Board* board) {
    const Api& api = *k.api;
    SIM_NCCL(api.ncclAllReduce(k.buf, k.buf, rank == 0 ? 4 : 5, ncclInt32,
                               ncclSum, k.comm, k.stream));
    SIM_CHECK(StillBusyAfter(k, 300));
    ncclResult_t a = ncclInternalError;
    SIM_NCCL(api.ncclCommGetAsyncError(k.comm, &a));
    SIM_CHECK(a == ncclSuccess);  // NCCL says nothing: it hangs
    // Rank 0 aborts once both have checked (a rank descheduled past the
    // abort would see it early); rank 1 then sees its peer gone.
    board->flags[0].fetch_add(1);
    if (rank == 0) {
      SIM_CHECK(WaitUntil([&] { return board->flags[0].load() == 2; }, 10000));
      SIM_NCCL(api.ncclCommAbort(k.comm));
    }
    if (rank == 1)
      SIM_CHECK(AsyncErrorWithin(api, k.comm, 5000) != ncclSuccess);
    SIM_CUDA(api.cudaStreamSynchronize(k.stream));
    if (rank == 1) SIM_NCCL(api.ncclCommAbort(k.comm));
    return 0;
  });
  for (const auto& r : results) EXPECT_TRUE(r.ExitedWith(0)) << r.Describe();
  const std::string both = results[0].err + results[1].err;
  EXPECT_EQ(Occurrences(both, "dkgpusim: mismatch"), 1) << both;
  EXPECT_NE(both.find("rank 0 ncclAllReduce(count 4"), std::string::npos)
      << both;
  EXPECT_NE(both.find("rank 1 ncclAllReduce(count 5"), std::string::npos)
      << both;
}

TEST(SimNcclFaults, ASendAndReceiveOfDifferentSizesHang) {
  auto results = RunJoined(2, [&](int rank, Rank& k, Board* board) {
    const Api& api = *k.api;
    if (rank == 0) {
      SIM_NCCL(api.ncclSend(k.buf, 8, ncclInt32, 1, k.comm, k.stream));
    } else {
      SIM_NCCL(api.ncclRecv(k.buf, 6, ncclInt32, 0, k.comm, k.stream));
      SIM_CHECK(StillBusyAfter(k, 200));
      board->flags[0].store(1);
    }
    SIM_CHECK(WaitUntil([&] { return board->flags[0].load() == 1; }, 10000));
    SIM_NCCL(api.ncclCommAbort(k.comm));
    SIM_CUDA(api.cudaStreamSynchronize(k.stream));
    return 0;
  });
  for (const auto& r : results) EXPECT_TRUE(r.ExitedWith(0)) << r.Describe();
  EXPECT_NE(results[1].err.find("dkgpusim: mismatch"), std::string::npos)
      << results[1].err;
  EXPECT_NE(results[1].err.find("sent 32 bytes to rank 1, whose ncclRecv "
                                "expects 24"),
            std::string::npos)
      << results[1].err;
}

TEST(SimNcclFaults, TheHangKnobBlocksUntilAbortAndPeersLearnOfTheAbort) {
  auto results = RunJoined(
      2,
      [&](int rank, Rank& k, Board* board) {
        const Api& api = *k.api;
        SIM_NCCL(api.ncclAllReduce(k.buf, k.buf, 4, ncclInt32, ncclSum, k.comm,
                                   k.stream));
        SIM_CHECK(StillBusyAfter(k, 200));
        // The abort waits for both checks, as above.
        board->flags[0].fetch_add(1);
        if (rank == 0) {
          SIM_CHECK(
              WaitUntil([&] { return board->flags[0].load() == 2; }, 10000));
          SIM_NCCL(api.ncclCommAbort(k.comm));
        } else {
          SIM_CHECK(AsyncErrorWithin(api, k.comm, 5000) == ncclRemoteError);
        }
        SIM_CUDA(api.cudaStreamSynchronize(k.stream));
        if (rank == 1) SIM_NCCL(api.ncclCommDestroy(k.comm));
        return 0;
      },
      {{"DKSIM_NCCL_HANG_RANK", "0"}, {"DKSIM_NCCL_HANG_AT", "1"}});
  for (const auto& r : results) EXPECT_TRUE(r.ExitedWith(0)) << r.Describe();
  EXPECT_NE(results[1].err.find("aborted its communicator"), std::string::npos)
      << results[1].err;
}

TEST(SimNcclFaults, BuffersMustBeTheCommunicatorsDeviceMemory) {
  auto r = RunJoinedAlone([&](Rank& k) {
    const Api& api = *k.api;
    int host[4] = {};
    SIM_CHECK(api.ncclAllReduce(host, host, 4, ncclInt32, ncclSum, k.comm,
                                k.stream) == ncclInvalidArgument);
    int* other = nullptr;
    SIM_CUDA(api.cudaSetDevice(1));
    SIM_CUDA(api.cudaMalloc(reinterpret_cast<void**>(&other), 16));
    SIM_CHECK(api.ncclAllReduce(other, other, 4, ncclInt32, ncclSum, k.comm,
                                k.stream) == ncclInvalidArgument);
    // Past the end of the allocation (64 ints).
    SIM_CHECK(api.ncclAllReduce(k.buf, k.buf, 65, ncclInt32, ncclSum, k.comm,
                                k.stream) == ncclInvalidArgument);
    SIM_NCCL(api.ncclCommDestroy(k.comm));
    return 0;
  });
  EXPECT_TRUE(r.ExitedWith(0)) << r.Describe();
  EXPECT_NE(r.err.find("not of device 0"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace dksim_test
