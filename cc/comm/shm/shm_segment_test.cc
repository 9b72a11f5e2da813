#include "cc/comm/shm/shm_segment.h"

#include <dirent.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cc/comm/shm/peer_liveness.h"
#include "cc/store/hash_store.h"
#include "gtest/gtest.h"

namespace distkit {
namespace {

// This process's mappings of distkit segments (/proc/self/maps).
int MappedSegments() {
  std::ifstream maps("/proc/self/maps");
  int count = 0;
  for (std::string line; std::getline(maps, line);) {
    count += absl::StrContains(line, "/dev/shm/distkit-");
  }
  return count;
}

// This process's open file descriptors.
int OpenFds() {
  DIR* dir = opendir("/proc/self/fd");
  int count = 0;
  while (readdir(dir) != nullptr) ++count;
  closedir(dir);
  return count;
}

// Segments in /dev/shm that this process created (their name says so).
int OwnSegmentNames() {
  // With its pid namespace: in a test sandbox every process has a small pid
  // of its own namespace, and another sandbox's rank with the same pid
  // (a test running beside this one) made its segment count as this one's.
  const std::string mine =
      absl::StrCat("distkit-", getpid(), "-", ThisPidNamespace(), "-");
  DIR* dir = opendir("/dev/shm");
  int count = 0;
  while (dirent* e = readdir(dir)) count += absl::StartsWith(e->d_name, mine);
  closedir(dir);
  return count;
}

// Both ranks in this process, one store: the mapping works and goes with
// its owner (the baseline the failure cases below are held against).
TEST(ShmMappingTest, MapsAndUnmaps) {
  HashStore store;
  absl::StatusOr<std::unique_ptr<ShmMapping>> zero, one;
  std::thread peer(
      [&] { one = ShmMapping::Map(store, 1, 2, {}, absl::Seconds(30)); });
  zero = ShmMapping::Map(store, 0, 2, {}, absl::Seconds(30));
  peer.join();
  ASSERT_TRUE(zero.ok()) << zero.status();
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_NE(*zero, nullptr);
  ASSERT_NE(*one, nullptr);
  EXPECT_EQ(MappedSegments(), 2);
  EXPECT_EQ(OwnSegmentNames(), 0);  // unlinked once both mapped
  zero->reset();
  one->reset();
  EXPECT_EQ(MappedSegments(), 0);
}

// A peer that never arrives: rank 0's attach check times out, and it keeps
// neither the mapping (the segment's memory) nor its name.
TEST(ShmMappingTest, AFailedAttachCheckKeepsNothing) {
  HashStore store;
  const int fds = OpenFds();
  absl::StatusOr<std::unique_ptr<ShmMapping>> mapping =
      ShmMapping::Map(store, 0, 2, {}, absl::Milliseconds(100));
  EXPECT_EQ(mapping.status().code(), absl::StatusCode::kDeadlineExceeded)
      << mapping.status();
  EXPECT_EQ(MappedSegments(), 0);
  EXPECT_EQ(OwnSegmentNames(), 0);
  EXPECT_EQ(OpenFds(), fds);
}

// A store that refuses to publish the segment's name.
class RefusingNameStore : public HashStore {
 public:
  absl::Status Set(absl::string_view key, absl::string_view value) override {
    if (key == "name" && !value.empty()) {
      return absl::UnavailableError("the store's host went away");
    }
    return HashStore::Set(key, value);
  }
};

// Rank 0 cannot publish the name: the error comes back, and neither the
// segment's descriptor, its mapping nor its name is left behind.
TEST(ShmMappingTest, AnUnpublishedNameKeepsNothing) {
  RefusingNameStore store;
  const int fds = OpenFds();
  absl::StatusOr<std::unique_ptr<ShmMapping>> mapping =
      ShmMapping::Map(store, 0, 2, {}, absl::Seconds(5));
  EXPECT_EQ(mapping.status().code(), absl::StatusCode::kUnavailable)
      << mapping.status();
  EXPECT_EQ(MappedSegments(), 0);
  EXPECT_EQ(OwnSegmentNames(), 0);
  EXPECT_EQ(OpenFds(), fds);
}

}  // namespace
}  // namespace distkit
