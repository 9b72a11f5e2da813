// GradReducer where parameters and the comm device are not both the host
// (issue 13), on any machine: the extension device of
// testing/cc/extension_device.h stands in for a GPU; its bytes are kept
// transformed, so a host memcpy of "device" memory gives wrong averages.
//
//   ... gloo      parameters on ext:0, a host comm device (CUDA parameters
//                 over Gloo: buckets staged through the host)
//   ... ext_test  a device comm device (NCCL's case): parameters on ext:0
//                 (buckets and views on the device, mean there) and on the
//                 host (staged to it)
//   ... nccl      the same on CUDA over NCCL: a GPU, or the CUDA + NCCL
//                 simulator (testing/gpu_sim), whose device memory the host
//                 cannot touch and whose streams run late; and the
//                 gradients made on the caller's own stream (SetCudaStream)
//
// Every average is checked against the mean each rank computes from the
// formula all ranks use, at world sizes 1-4.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cc/dist_api/dist.h"
#include "cc/parallel/devices_job_test_util.h"
#include "cc/parallel/grad_reducer.h"
#include "cc/parallel/grad_reducer_test_model.h"
#include "testing/cc/caller_stream.h"
#include "testing/cc/devices_job.h"
#include "testing/cc/extension_device.h"
#include "testing/cc/grad_reducer_values.h"
#include "testing/cc/rank_check.h"

namespace distkit {
namespace {

using ::distkit::testing::ExtTensor;

int rank_ = 0, size_ = 1;
// The device that is not the host: ext:0, or the comm device of an nccl
// group (a CUDA device, real or simulated).
Device device_ = Device::Ext(0);

// Parameters and gradients on a device or the host.
using Model = testing::GradReducerTestModel;

// Several buckets, the rebuild after iteration 0, buffers broadcast.
void Training(std::shared_ptr<ProcessGroup> world, Device device) {
  const std::string where =
      absl::StrCat("params on ", device.ToString(), ", comm on ",
                   world->comm_device().ToString());
  Model m(device, rank_, {100, 3000, 7, 1500});
  GradReducer::Options o;
  o.first_bucket_cap_mb = 2048.0 / (1 << 20);
  o.bucket_cap_mb = 8192.0 / (1 << 20);
  auto r = GradReducer::Create(world, m.Params(), {}, o);
  testing::RequireOk(r.status(), "create: " + where);
  m.Sync();
  for (size_t p = 0; p < m.params.size(); ++p) {
    testing::Require(m.params[p][0] == float(p) && m.params[p].back() == p,
                     "rank 0's parameters broadcast: " + where);
  }
  testing::Require((*r)->buckets().size() > 1, "several buckets");
  for (int it = 0; it < 3; ++it) {
    for (int p : {3, 1, 2, 0}) {  // an order the rebuild adopts
      m.Fill(it, p);
      testing::RequireOk((*r)->MarkReady(p, m.Grad(p)), "ready: " + where);
    }
    testing::RequireOk((*r)->Finalize(), "finalize: " + where);
    // A device mean (ncclAvg's order: sum, then divide) may differ from the
    // host's divide-then-sum in the last bit.
    for (int p = 0; p < 4; ++p)
      testing::RequireMeanGrad(m, p, it, size_, 1e-6, where);
  }
  // ReducedGrad lives on the comm device.
  auto reduced = (*r)->ReducedGrad(1);
  testing::RequireOk(reduced.status(), "reduced grad");
  testing::Require(reduced->device() == world->comm_device(),
                   "ReducedGrad is on the comm device");
}

void UnusedAndHooks(std::shared_ptr<ProcessGroup> world, Device device) {
  const std::string where = absl::StrCat("params on ", device.ToString());
  {
    Model m(device, rank_, {50, 60, 70});
    GradReducer::Options o;
    o.find_unused_parameters = true;
    auto r = GradReducer::Create(world, m.Params(), {}, o);
    testing::RequireOk(r.status(), "create unused: " + where);
    // Parameter 1 is unused on rank 0 only; parameter 2 everywhere.
    testing::RequireOk(
        (*r)->PrepareForBackward(rank_ == 0 ? std::vector<int>{1, 2}
                                            : std::vector<int>{2}),
        "prepare");
    for (int p : {1, 0}) {
      if (p == 1 && rank_ == 0) continue;
      m.Fill(0, p);
      testing::RequireOk((*r)->MarkReady(p, m.Grad(p)), "ready unused");
    }
    testing::RequireOk((*r)->Finalize(), "finalize unused: " + where);
    testing::RequireMeanGrad(m, 0, 0, size_, 1e-6, "used everywhere: " + where);
    testing::Require((*r)->globally_used(1) == (size_ > 1),
                     "parameter 1 used by some rank");
    testing::Require(!(*r)->globally_used(2), "parameter 2 unused everywhere");
  }
  for (CommHook hook : {CommHook::kFp16Compress, CommHook::kBf16Compress}) {
    Model m(device, rank_, {257, 33});
    testing::RequireHookAverages(world, m, hook, size_, " on " + where);
  }
}

// gradient_as_bucket_view where parameters are on the comm device: views
// are device memory, written and read through copies.
void Views(std::shared_ptr<ProcessGroup> world, Device device) {
  Model m(device, rank_, {300, 40});
  GradReducer::Options o;
  o.gradient_as_bucket_view = true;
  auto v = GradReducer::Create(world, m.Params(), {}, o);
  testing::RequireOk(v.status(), "create views");
  for (int it = 0; it < 2; ++it) {
    for (int p : {0, 1}) {
      auto view = (*v)->GradView(p);
      testing::RequireOk(view.status(), "view");
      testing::Require(view->device() == device, "the view is on the device");
      std::vector<float> g(view->numel());
      for (int64_t k = 0; k < view->numel(); ++k)
        g[k] = testing::GradValue(rank_, p, k, it);
      testing::RequireOk(CopyBytes(view->data(), device, g.data(),
                                   Device::Cpu(), g.size() * sizeof(float)),
                         "write view");
      testing::RequireOk((*v)->MarkReady(p, *view), "ready view");
    }
    testing::RequireOk((*v)->Finalize(), "finalize views");
    for (int p : {0, 1}) {
      auto view = (*v)->GradView(p);
      std::vector<float> g(view->numel());
      testing::RequireOk(CopyBytes(g.data(), Device::Cpu(), view->data(),
                                   device, g.size() * sizeof(float)),
                         "read view");
      for (int64_t k = 0; k < view->numel(); ++k) {
        testing::Require(
            std::abs(g[k] - testing::MeanGradValue(p, k, it, size_)) < 1e-6,
            absl::StrCat("view averaged: ", g[k], " want ",
                         testing::MeanGradValue(p, k, it, size_)));
      }
    }
  }
}

// The caller's stream (issue 35): the gradients are written on the
// caller's non-blocking stream, each after a long stretch of device work
// there (the simulator's dksimStreamSleep), and handed over at once, as
// torch's autograd does. The bucket copies must follow that stream (a copy
// on the legacy stream or a private one reads the old gradients, every
// time), the all_reduce must follow them, and the copies back must come
// before the caller's next work on its stream (the averages are read
// there). Nothing waits on the host for the caller's work meanwhile:
// handing every gradient over takes well under the work's time.
void CallerStreamOrder(std::shared_ptr<ProcessGroup> world) {
  auto stream = testing::CallerStream::Create(world);
  testing::RequireOk(stream.status(), "a caller's stream");
  const std::vector<int64_t> sizes = {2000, 700, 3000};
  Model m(world->comm_device(), rank_, sizes);
  GradReducer::Options o;
  o.first_bucket_cap_mb = 4096.0 / (1 << 20);
  o.bucket_cap_mb = 8192.0 / (1 << 20);
  auto r = GradReducer::Create(world, m.Params(), {}, o);
  testing::RequireOk(r.status(), "create on the caller's stream");
  testing::Require((*r)->buckets().size() > 1, "several buckets");
  constexpr long kWorkUs = 100000;
  bool slept_all = true;
  for (int it = 0; it < 3; ++it) {
    bool slept = true;
    const absl::Time start = absl::Now();
    for (int p : {2, 1, 0}) {
      std::vector<float>& g = m.grads[p];
      for (size_t k = 0; k < g.size(); ++k)
        g[k] = testing::GradValue(rank_, p, k, it);
      slept = (*stream)->Sleep(kWorkUs) && slept;
      testing::RequireOk((*stream)->Write(m.ext_grads[p].ref.data(), g.data(),
                                          g.size() * sizeof(float)),
                         "backward on the caller's stream");
      testing::RequireOk((*r)->MarkReady(p, m.Grad(p)),
                         "ready on the caller's stream");
    }
    const absl::Duration handed = absl::Now() - start;
    slept_all = slept_all && slept;
    if (slept) {
      testing::Require(
          handed < absl::Microseconds(3 * kWorkUs / 2),
          absl::StrCat("iteration ", it, ": handing 3 gradients over took ",
                       absl::FormatDuration(handed), ", beside ",
                       3 * kWorkUs / 1000,
                       " ms of the caller's device work: the host waited "
                       "for the caller's stream"));
    }
    testing::RequireOk((*r)->Finalize(), "finalize on the caller's stream");
    for (int p = 0; p < 3; ++p) {
      std::vector<float> got(sizes[p]);
      testing::RequireOk((*stream)->Read(got.data(), m.ext_grads[p].ref.data(),
                                         got.size() * sizeof(float)),
                         "read on the caller's stream");
      for (int64_t k = 0; k < sizes[p]; ++k) {
        const double want = testing::MeanGradValue(p, k, it, size_);
        if (std::abs(got[k] - want) > 1e-6 * std::max(1.0, std::abs(want))) {
          testing::Require(false,
                           absl::StrCat("iteration ", it, ": param ", p, "[", k,
                                        "] = ", got[k], ", want ", want,
                                        " (a copy off the caller's stream)"));
          break;
        }
      }
    }
  }
  std::printf("GradReducer on the caller's stream: 3 iterations, %s\n",
              slept_all ? "gradients written after 100 ms of device work each"
                        : "no device sleep available");
}

void BadInput(std::shared_ptr<ProcessGroup> world) {
  Model host(Device::Cpu(), rank_, {4});
  Model ext(device_, rank_, {4});
  auto mixed = GradReducer::Create(
      world, {{host.Param(0), "a"}, {ext.Param(0), "b"}}, {}, {});
  testing::Require(
      absl::IsInvalidArgument(mixed.status()) &&
          absl::StrContains(mixed.status().message(), "several devices") &&
          absl::StrContains(mixed.status().message(), device_.ToString()),
      absl::StrCat("parameters on two devices refused: ",
                   mixed.status().ToString()));
  // Views off the comm device cannot be: refused, not a silent copy.
  Model off(world->comm_device().is_cpu() ? device_ : Device::Cpu(), rank_,
            {4});
  GradReducer::Options o;
  o.gradient_as_bucket_view = true;
  auto views = GradReducer::Create(world, off.Params(), {}, o);
  testing::Require(absl::IsInvalidArgument(views.status()),
                   absl::StrCat("views off the comm device refused: ",
                                views.status().ToString()));
  // A gradient on another device than its parameter.
  auto r = GradReducer::Create(world, host.Params(), {}, {});
  testing::RequireOk(r.status(), "create");
  absl::Status s = (*r)->MarkReady(0, ext.Grad(0));
  testing::Require(
      absl::IsInvalidArgument(s),
      absl::StrCat("gradient on the wrong device: ", s.ToString()));
}

// The checks on the job's backend.
void RunChecks(const testing::DevicesJob& job) {
  rank_ = job.rank;
  size_ = job.size;
  device_ = job.device;
  if (job.backend == "gloo") {
    Training(job.world, device_);
    UnusedAndHooks(job.world, device_);
  } else {
    Training(job.world, device_);
    Training(job.world, Device::Cpu());
    UnusedAndHooks(job.world, device_);
    UnusedAndHooks(job.world, Device::Cpu());
    Views(job.world, device_);
  }
  if (job.backend == "nccl") CallerStreamOrder(job.world);
  BadInput(job.world);
}

}  // namespace
}  // namespace distkit

int main(int argc, char** argv) {
  return distkit::testing::RunDevicesJob(argc, argv, "GradReducer on devices",
                                         distkit::RunChecks);
}
