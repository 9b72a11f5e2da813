// distkit._c10d: the "distkit" c10d backend for torch.distributed (torch
// 1.13's ProcessGroup extension point; torch 2.x's Backend, torch_base.h).
// distkit/torch_backend.py loads it, hands it the libdistkit.so that ctypes
// loaded (init), and registers a creator that makes ProcessGroupDistkit over
// distkit's groups.

#include <torch/csrc/utils/pybind.h>

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
      [](double timeout_s, double in_flight_s) {
        using distkit::c10d_ext::DistkitWork;
        const bool idle =
            distkit::c10d_ext::CompletionPool::Get().WaitIdle(timeout_s);
        // Futures an operation still in flight will complete: their
        // then-callbacks would run on the pool while the interpreter
        // finalizes (std::terminate). Waited for briefly: an operation a
        // dead or absent peer holds up ends only at its timeout, and a
        // process that exits because of that must not wait for it.
        const auto until = std::chrono::steady_clock::now() +
                           std::chrono::duration<double>(in_flight_s);
        while (DistkitWork::PendingFutures().load() != 0 &&
               std::chrono::steady_clock::now() < until) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        // The completions those operations posted meanwhile.
        const bool settled =
            distkit::c10d_ext::CompletionPool::Get().WaitIdle(timeout_s) &&
            DistkitWork::PendingFutures().load() == 0;
        DistkitWork::ReleaseFinished();
        return idle && settled;
      },
      py::arg("timeout_s"), py::arg("in_flight_s") = 3.0,
      py::call_guard<py::gil_scoped_release>(),
      "At exit, before the interpreter finalizes: waits up to timeout_s for "
      "every completion posted so far to have run, and up to in_flight_s "
      "for the futures of operations still in flight; true when all have.");
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
