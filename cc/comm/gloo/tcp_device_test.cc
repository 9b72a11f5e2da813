// CreateTcpDevice: Gloo's loop thread is named dk-gloo-loop and runs as
// SCHED_BATCH (DISTKIT_GLOO_LOOP_BATCH=0: Gloo's default policy); the
// calling thread's own policy is left as it was.

#include "cc/comm/gloo/tcp_device.h"

#include <dirent.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include <exception>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace distkit {
namespace {

// The ids of this process's threads named `name`.
std::vector<int> ThreadsNamed(const std::string& name) {
  std::vector<int> tids;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return tids;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    std::ifstream in(std::string("/proc/self/task/") + entry->d_name + "/comm");
    std::string comm;
    std::getline(in, comm);
    if (comm == name) tids.push_back(std::stoi(entry->d_name));
  }
  closedir(dir);
  return tids;
}

// ThreadsNamed(name) once it has `count` entries (within 5 s): a joined
// thread can stay in /proc/self/task for a moment after join() returns.
std::vector<int> SettledThreadsNamed(const std::string& name, size_t count) {
  std::vector<int> tids = ThreadsNamed(name);
  for (int i = 0; i < 500 && tids.size() != count; ++i) {
    usleep(10000);
    tids = ThreadsNamed(name);
  }
  return tids;
}

std::shared_ptr<gloo::transport::Device> LoopbackDevice() {
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  return CreateTcpDevice(attr);
}

TEST(TcpDeviceTest, LoopThreadIsNamedAndRunsAsBatch) {
  unsetenv("DISTKIT_GLOO_LOOP_BATCH");
  const int caller_policy = sched_getscheduler(0);
  auto device = LoopbackDevice();
  const std::vector<int> loops = SettledThreadsNamed("dk-gloo-loop", 1);
  ASSERT_EQ(loops.size(), 1u) << "one device, one loop thread";
  EXPECT_EQ(sched_getscheduler(loops[0]), SCHED_BATCH);
  EXPECT_EQ(sched_getscheduler(0), caller_policy);
  device.reset();
  EXPECT_TRUE(SettledThreadsNamed("dk-gloo-loop", 0).empty())
      << "the loop thread ends with its device";
}

TEST(TcpDeviceTest, VariableKeepsGloosDefaultPolicy) {
  setenv("DISTKIT_GLOO_LOOP_BATCH", "0", 1);
  auto device = LoopbackDevice();
  unsetenv("DISTKIT_GLOO_LOOP_BATCH");
  const std::vector<int> loops = SettledThreadsNamed("dk-gloo-loop", 1);
  ASSERT_EQ(loops.size(), 1u);
  EXPECT_EQ(sched_getscheduler(loops[0]), sched_getscheduler(0));
}

// What CreateTcpDevice(attr) threw; "" where it made a device.
std::string CreateError(const gloo::transport::tcp::attr& attr) {
  try {
    CreateTcpDevice(attr);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// Gloo itself crashes on a name that does not resolve (tcp_device.cc).
TEST(TcpDeviceTest, NameThatDoesNotResolveIsAnError) {
  gloo::transport::tcp::attr attr;
  attr.hostname = "no-such-host.invalid";
  EXPECT_THAT(
      CreateError(attr),
      testing::HasSubstr(
          "the listen address 'no-such-host.invalid' does not resolve"));
}

// An error from Gloo itself (an interface that does not exist) reaches the
// caller as Gloo threw it, and leaves no loop thread behind.
TEST(TcpDeviceTest, GloosErrorsPassThrough) {
  gloo::transport::tcp::attr attr;
  attr.iface = "no-such-if0";
  EXPECT_THAT(CreateError(attr), testing::HasSubstr("no-such-if0"));
  EXPECT_TRUE(SettledThreadsNamed("dk-gloo-loop", 0).empty());
}

}  // namespace
}  // namespace distkit
