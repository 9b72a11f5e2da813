// distkit._c10d: the "distkit" c10d backend for torch.distributed (torch
// 1.13's ProcessGroup extension point; torch 2.x's Backend, torch_base.h).
// distkit/torch_backend.py loads it, hands it the libdistkit.so that ctypes
// loaded (init), and registers a creator that makes ProcessGroupDistkit over
// distkit's groups.

#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>

#include "bindings/python/c10d/completion_pool.h"
#include "bindings/python/c10d/distkit_work.h"
#include "bindings/python/c10d/dk_api.h"
#include "bindings/python/c10d/process_group_distkit.h"

namespace py = pybind11;

namespace distkit {
namespace c10d_ext {
namespace {

c10::intrusive_ptr<ProcessGroupDistkit> Make(int rank, int size,
                                             uintptr_t group) {
  Dk();  // initialized, or a clear error
  return c10::make_intrusive<ProcessGroupDistkit>(
      rank, size, reinterpret_cast<dk_group_t*>(group));
}

// Whether a ProcessGroupDistkit still exists, without keeping it: torch 2.x
// holds its backends in C++ alone, so the Python side cannot watch their
// wrappers to learn when torch has dropped one.
class Liveness {
 public:
  explicit Liveness(const c10::intrusive_ptr<ProcessGroupDistkit>& pg)
      : pg_(pg) {}
  bool alive() const { return !pg_.expired(); }

 private:
  c10::weak_intrusive_ptr<ProcessGroupDistkit> pg_;
};

}  // namespace
}  // namespace c10d_ext
}  // namespace distkit

PYBIND11_MODULE(_c10d, m) {
  using distkit::c10d_ext::ProcessGroupDistkit;
  m.doc() = "torch.distributed's \"distkit\" backend (c10d ProcessGroup)";
  m.def(
      "init",
      [](uintptr_t library) {
        distkit::c10d_ext::LoadDkApi(reinterpret_cast<void*>(library));
      },
      py::arg("library"),
      "Resolves the C ABI from libdistkit.so's dlopen handle (ctypes' "
      "CDLL._handle) and checks its version.");
  m.def(
      "_drain",
      [](double timeout_s) {
        // Futures still to be completed by operations in flight count too:
        // their then-callbacks would otherwise run on the pool while the
        // interpreter finalizes (std::terminate).
        using distkit::c10d_ext::DistkitWork;
        const auto until = std::chrono::steady_clock::now() +
                           std::chrono::duration<double>(timeout_s);
        bool idle = false;
        while (true) {
          const double left = std::chrono::duration<double>(
                                  until - std::chrono::steady_clock::now())
                                  .count();
          idle = distkit::c10d_ext::CompletionPool::Get().WaitIdle(
                     std::max(0.0, left)) &&
                 DistkitWork::PendingFutures().load() == 0;
          if (idle || left <= 0) break;
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        DistkitWork::ReleaseFinished();
        return idle;
      },
      py::arg("timeout_s"), py::call_guard<py::gil_scoped_release>(),
      "Waits for every completion posted so far, and every future an "
      "operation in flight will complete, to have run (at exit, before the "
      "interpreter finalizes), at most timeout_s; true when they have.");
  m.def(
      "_completion_threads",
      [] { return distkit::c10d_ext::CompletionPool::Get().threads(); },
      "Threads the completion pool has started (tests).");
  py::class_<distkit::c10d_ext::Liveness>(m, "_Liveness")
      .def("alive", &distkit::c10d_ext::Liveness::alive);
  // A subclass of torch's ProcessGroup (Backend under torch 2.x): torch's
  // own calls (DDP's reducer included) reach the overrides in C++.
  // dynamic_attr: the Python side records the distkit group it runs on as
  // `_dk_group` (torch_backend._groups_in_use keeps it alive).
  m.attr("TORCH_BASE_CLASS") = distkit::c10d_ext::kTorchBaseClass;
  py::class_<ProcessGroupDistkit, c10::intrusive_ptr<ProcessGroupDistkit>>(
      m, "ProcessGroupDistkit",
      py::module::import("torch._C._distributed_c10d")
          .attr(distkit::c10d_ext::kTorchBaseClass),
      py::dynamic_attr())
      .def(py::init(&distkit::c10d_ext::Make), py::arg("rank"), py::arg("size"),
           py::arg("group"),
           "Over the dk_group_t* `group` (an address; 0: distkit's default "
           "group), which must outlive it.")
      .def_property_readonly("group_name", &ProcessGroupDistkit::group_name)
      .def(
          "_liveness",
          [](const c10::intrusive_ptr<ProcessGroupDistkit>& self) {
            return distkit::c10d_ext::Liveness(self);
          },
          "Tells whether this group still exists (alive()), not keeping it.")
      .def("_set_record_lends", &ProcessGroupDistkit::set_record_lends)
      .def("_take_recorded_lends", &ProcessGroupDistkit::TakeRecordedLends);
}
