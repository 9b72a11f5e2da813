#include "cc/comm/gloo/tcp_device.h"

#include <gloo/transport/tcp/device.h>
#include <pthread.h>
#include <sched.h>

#include <exception>
#include <thread>

namespace distkit {

std::shared_ptr<gloo::transport::Device> CreateTcpDevice(
    const gloo::transport::tcp::attr& attr) {
  // Gloo starts the loop thread in the device's constructor, with no way to
  // reach it after; a thread inherits its creator's policy and name, so the
  // device is made on a short-lived thread that has both.
  std::shared_ptr<gloo::transport::Device> device;
  std::exception_ptr error;
  std::thread maker([&] {
    const sched_param param = {};
    sched_setscheduler(0, SCHED_BATCH, &param);  // best effort (see header)
    pthread_setname_np(pthread_self(), "dk-gloo-loop");
    try {
      device = gloo::transport::tcp::CreateDevice(attr);
    } catch (...) {
      error = std::current_exception();
    }
  });
  maker.join();
  if (error) std::rethrow_exception(error);
  return device;
}

}  // namespace distkit
