#include "cc/comm/gloo/tcp_device.h"

#include <gloo/transport/tcp/device.h>
#include <netdb.h>
#include <pthread.h>
#include <sched.h>
#include <sys/socket.h>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <thread>

namespace distkit {
namespace {

// Gloo looks the host name up with getaddrinfo and takes only -1 for a
// failure, so a name that does not resolve (EAI_NONAME is -2) has it walk an
// uninitialized list: a segmentation fault. Looked up here first.
void CheckResolves(const gloo::transport::tcp::attr& attr) {
  if (!attr.iface.empty() || attr.hostname.empty()) return;
  addrinfo hints = {};
  hints.ai_family = attr.ai_family;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  const int rv = getaddrinfo(attr.hostname.c_str(), nullptr, &hints, &result);
  if (rv != 0) {
    throw std::invalid_argument("the listen address '" + attr.hostname +
                                "' does not resolve: " + gai_strerror(rv));
  }
  freeaddrinfo(result);
}

bool LoopAsBatch() {
  const char* v = std::getenv("DISTKIT_GLOO_LOOP_BATCH");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

}  // namespace

std::shared_ptr<gloo::transport::Device> CreateTcpDevice(
    const gloo::transport::tcp::attr& attr) {
  // Gloo starts the loop thread in the device's constructor, with no way to
  // reach it after; a thread inherits its creator's policy and name, so the
  // device is made on a short-lived thread that has both.
  CheckResolves(attr);
  const bool batch = LoopAsBatch();
  std::shared_ptr<gloo::transport::Device> device;
  std::exception_ptr error;
  std::thread maker([&] {
    if (batch) {
      const sched_param param = {};
      sched_setscheduler(0, SCHED_BATCH, &param);  // best effort (see header)
    }
    pthread_setname_np(pthread_self(), "dk-gloo-loop");
    try {
      device = gloo::transport::tcp::CreateDevice(attr);
    } catch (...) {
      error = std::current_exception();
    }
    // The name was for the loop thread; this one may outlive join() in
    // /proc for a moment.
    pthread_setname_np(pthread_self(), "dk-gloo-made");
  });
  maker.join();
  if (error) std::rethrow_exception(error);
  return device;
}

}  // namespace distkit
