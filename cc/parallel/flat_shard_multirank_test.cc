// FlatShard in a real job: a two-layer network (two units, one with a
// float64 parameter, so a unit holds two flat buffers; sizes that need
// padding) trained for 6 SGD steps under every strategy, with mixed
// precision, CPU offload, prefetch and no_sync accumulation. Every rank also
// trains the same network alone on the concatenated global batch; the
// sharded parameters must equal it (relative difference per tensor <= 1e-5
// in float32; float16 / bfloat16 bounds below). Then state dicts (full,
// rank-0-only, sharded and re-sharded to half the ranks) and misuse. Frozen
// parameters: a flat buffer of their own with no gradient and no reduction.

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cc/core/float_cast.h"
#include "cc/parallel/flat_shard.h"
#include "testing/cc/file_contents.h"
#include "testing/cc/rank_check.h"
#include "testing/cc/rank_env.h"

namespace distkit {
namespace {

using testing::Check;
using testing::CheckOk;
using testing::Require;
using testing::RequireOk;

constexpr int kIn = 6, kHidden = 10, kOut = 3, kLocalBatch = 4, kSteps = 6;
constexpr double kLr = 0.1;

// The model's parameters in double, as the reference keeps them (rounded to
// the unit's master dtype after every step, as the shards are).
struct Params {
  std::vector<double> w1, b1, w2, b2;
};

Params InitialParams(int seed) {
  Params p;
  auto fill = [&](std::vector<double>& v, int n, int salt) {
    v.resize(n);
    for (int i = 0; i < n; ++i) {
      v[i] = 0.3 * std::sin(0.7 * i + salt + seed);
    }
  };
  fill(p.w1, kHidden * kIn, 1);
  fill(p.b1, kHidden, 2);
  fill(p.w2, kOut * kHidden, 3);
  fill(p.b2, kOut, 4);
  return p;
}

double X(int sample, int step, int j) {
  return std::cos(0.37 * sample + 0.11 * step + 0.5 * j);
}
double Y(int sample, int step, int k) {
  return std::sin(0.23 * sample - 0.07 * step + k);
}

// Values rounded through `dtype` (what a gather in that dtype yields).
std::vector<double> Round(const std::vector<double>& v, DataType dtype) {
  std::vector<uint64_t> tmp(v.size());
  std::vector<double> out(v.size());
  CastFloats(v.data(), DataType::kFloat64, tmp.data(), dtype, v.size())
      .IgnoreError();
  CastFloats(tmp.data(), dtype, out.data(), DataType::kFloat64, v.size())
      .IgnoreError();
  return out;
}

// Gradients of the mean loss over samples [first, first + count) at `step`.
Params Grads(const Params& p, int first, int count, int step) {
  Params g;
  g.w1.assign(p.w1.size(), 0);
  g.b1.assign(p.b1.size(), 0);
  g.w2.assign(p.w2.size(), 0);
  g.b2.assign(p.b2.size(), 0);
  for (int s = first; s < first + count; ++s) {
    double h[kHidden], out[kOut], dout[kOut], dh[kHidden];
    for (int i = 0; i < kHidden; ++i) {
      double a = p.b1[i];
      for (int j = 0; j < kIn; ++j) a += p.w1[i * kIn + j] * X(s, step, j);
      h[i] = std::tanh(a);
    }
    for (int k = 0; k < kOut; ++k) {
      double a = p.b2[k];
      for (int i = 0; i < kHidden; ++i) a += p.w2[k * kHidden + i] * h[i];
      out[k] = a;
      dout[k] = (out[k] - Y(s, step, k)) / count;
    }
    for (int i = 0; i < kHidden; ++i) {
      double d = 0;
      for (int k = 0; k < kOut; ++k) d += dout[k] * p.w2[k * kHidden + i];
      dh[i] = d * (1 - h[i] * h[i]);
    }
    for (int k = 0; k < kOut; ++k) {
      g.b2[k] += dout[k];
      for (int i = 0; i < kHidden; ++i) g.w2[k * kHidden + i] += dout[k] * h[i];
    }
    for (int i = 0; i < kHidden; ++i) {
      g.b1[i] += dh[i];
      for (int j = 0; j < kIn; ++j) g.w1[i * kIn + j] += dh[i] * X(s, step, j);
    }
  }
  return g;
}

double RelativeDifference(const std::vector<double>& a,
                          const std::vector<double>& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (a[i] - b[i]) * (a[i] - b[i]);
    norm += b[i] * b[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
}

std::vector<double> ToDouble(TensorRef t) {
  std::vector<double> out(t.numel());
  CastFloats(t.data(), t.dtype(), out.data(), DataType::kFloat64, t.numel())
      .IgnoreError();
  return out;
}

struct Config {
  ShardingStrategy strategy = ShardingStrategy::kFullShard;
  std::optional<DataType> param_dtype, reduce_dtype;
  bool offload = false;
  int accumulate = 1;  // micro-batches per step (no_sync for all but the last)
  std::string Name() const {
    return absl::StrCat(
        ShardingStrategyName(strategy),
        param_dtype ? absl::StrCat(" param ", DataTypeName(*param_dtype)) : "",
        reduce_dtype ? absl::StrCat(" reduce ", DataTypeName(*reduce_dtype))
                     : "",
        offload ? " offload" : "",
        accumulate > 1 ? absl::StrCat(" no_sync x", accumulate) : "");
  }
};

class Job {
 public:
  explicit Job(std::shared_ptr<ProcessGroup> world) : world_(world) {
    rank_ = world->rank();
    size_ = world->size();
    // "Nodes" of two ranks when the world divides, else one node.
    node_size_ = size_ % 2 == 0 ? 2 : size_;
    const int nodes = size_ / node_size_;
    // Every rank creates every group; each keeps the one it is in.
    auto join = [&](std::vector<int> ranks, const std::string& name,
                    std::shared_ptr<ProcessGroup>& mine) {
      GroupOptions o;
      o.timeout = absl::Seconds(60);
      o.name = name;
      auto g = world->NewGroup(ranks, o);
      RequireOk(g.status(), name);
      if ((*g)->is_member()) mine = *g;
    };
    for (int n = 0; n < nodes; ++n) {
      std::vector<int> ranks;
      for (int i = 0; i < node_size_; ++i) ranks.push_back(n * node_size_ + i);
      join(ranks, absl::StrCat("node", n), node_);
    }
    for (int i = 0; i < node_size_; ++i) {
      std::vector<int> ranks;
      for (int n = 0; n < nodes; ++n) ranks.push_back(n * node_size_ + i);
      join(ranks, absl::StrCat("replica", i), replicate_);
    }
  }

  // Trains with `config` and checks against the single-process reference.
  void Train(const Config& config) {
    const std::string name = config.Name();
    const DataType master1 = DataType::kFloat32;
    Params p = InitialParams(rank_ == 0 ? 0 : 100 + rank_);  // rank 0's wins
    Params reference = InitialParams(0);
    for (std::vector<double>* v : {&reference.w1, &reference.b1, &reference.w2})
      for (double& x : *v) x = static_cast<float>(x);  // float32 masters
    std::vector<float> w1(p.w1.begin(), p.w1.end()),
        b1(p.b1.begin(), p.b1.end()), w2(p.w2.begin(), p.w2.end());
    std::vector<double> b2 = p.b2;
    FlatShard::Options o;
    o.strategy = config.strategy;
    o.param_dtype = config.param_dtype;
    o.reduce_dtype = config.reduce_dtype;
    o.offload_params = config.offload;
    o.sync_module_states = true;
    const bool hybrid = config.strategy == ShardingStrategy::kHybridShard ||
                        config.strategy == ShardingStrategy::kHybridShardZero2;
    if (hybrid) o.replicate_group = replicate_;
    std::shared_ptr<ProcessGroup> group = hybrid ? node_ : world_;
    auto a =
        FlatShard::Create(group,
                          {{TensorRef(w1.data(), w1.size(), master1), "w1"},
                           {TensorRef(b1.data(), b1.size(), master1), "b1"}},
                          o);
    auto b = FlatShard::Create(
        group,
        {{TensorRef(w2.data(), w2.size(), master1), "w2"},
         {TensorRef(b2.data(), b2.size(), DataType::kFloat64), "b2"}},
        o);
    RequireOk(a.status(), name + ": create unit a");
    RequireOk(b.status(), name + ": create unit b");
    FlatShard& ua = **a;
    FlatShard& ub = **b;
    Check(ub.num_flat() == 2, name + ": a float32 and a float64 flat buffer");
    const DataType compute = config.param_dtype.value_or(DataType::kFloat32);
    const bool sharded = config.strategy != ShardingStrategy::kNoShard;
    const DataType low = config.reduce_dtype.value_or(compute);
    for (int step = 0; step < kSteps; ++step) {
      for (int micro = 0; micro < config.accumulate; ++micro) {
        const int batch = step * config.accumulate + micro;
        const bool sync = micro == config.accumulate - 1;
        ua.set_require_sync(sync);
        ub.set_require_sync(sync);
        // Forward: both gathers start at once (prefetch), then each unit is
        // waited for where it is needed.
        RequireOk(ua.StartUnshard(), name + ": start a");
        RequireOk(ub.StartUnshard(), name + ": start b");
        RequireOk(ua.WaitUnshard(), name + ": wait a");
        Params seen;
        seen.w1 = ToDouble(*ua.FullParam(0));
        seen.b1 = ToDouble(*ua.FullParam(1));
        Check(ua.FullParam(0)->dtype() == compute, name + ": gathered dtype");
        if (ReshardsAfterForward(config.strategy)) {
          RequireOk(ua.Reshard(), name + ": reshard a");
          Check(!ua.is_unsharded(), name + ": resharded after forward");
        }
        RequireOk(ub.WaitUnshard(), name + ": wait b");
        seen.w2 = ToDouble(*ub.FullParam(0));
        seen.b2 = ToDouble(*ub.FullParam(1));
        if (ReshardsAfterForward(config.strategy)) {
          RequireOk(ub.Reshard(), name + ": reshard b");
        }
        // Backward: b, then a, each gathered again where it was freed.
        const Params g = Grads(seen, rank_ * kLocalBatch, kLocalBatch, batch);
        RequireOk(ub.Unshard(), name + ": unshard b for backward");
        std::vector<float> gw2(g.w2.begin(), g.w2.end());
        RequireOk(ub.AccumulateGrad(
                      0, TensorRef(gw2.data(), gw2.size(), DataType::kFloat32)),
                  name + ": grad w2");
        std::vector<double> gb2 = g.b2;
        RequireOk(ub.AccumulateGrad(
                      1, TensorRef(gb2.data(), gb2.size(), DataType::kFloat64)),
                  name + ": grad b2");
        // b's reduction runs while a's backward computes (the overlap).
        RequireOk(ub.StartReduceScatterGrads(), name + ": start reducing b");
        if (sync) {
          Check(ub.is_reducing(), name + ": b's reduction in flight");
          Check(absl::IsFailedPrecondition(ub.StartReduceScatterGrads()),
                name + ": a second reduction of b while one is in flight");
        }
        RequireOk(ub.Reshard(), name + ": reshard b after backward");
        RequireOk(ua.Unshard(), name + ": unshard a for backward");
        // Unit a's gradients written straight into its full gradient view.
        std::vector<float> gw1(g.w1.begin(), g.w1.end());
        TensorRef view = *ua.FullGrad(0);
        RequireOk(AddFloats(gw1.data(), DataType::kFloat32, view.data(),
                            view.dtype(), gw1.size()),
                  name + ": grad w1 in place");
        std::vector<float> gb1(g.b1.begin(), g.b1.end());
        RequireOk(ua.AccumulateGrad(
                      1, TensorRef(gb1.data(), gb1.size(), DataType::kFloat32)),
                  name + ": grad b1");
        RequireOk(ub.WaitReduceScatterGrads(), name + ": wait for b");
        Check(!ub.is_reducing(), name + ": b reduced");
        RequireOk(ua.ReduceScatterGrads(), name + ": reduce a");
        RequireOk(ua.Reshard(), name + ": reshard a after backward");
        if (sync && sharded && config.param_dtype == std::nullopt) {
          Check(ua.held_bytes() == 2 * ua.Shard(0).nbytes(),
                name + ": only the shard and its gradient stay");
        }
      }
      // The optimizer on this rank's shards.
      for (FlatShard* u : {&ua, &ub}) {
        for (int k = 0; k < u->num_flat(); ++k) {
          TensorRef s = u->Shard(k), gr = u->ShardGrad(k);
          if (s.dtype() == DataType::kFloat32) {
            for (int64_t i = 0; i < s.numel(); ++i)
              s.data<float>()[i] -= kLr * gr.data<float>()[i];
          } else {
            for (int64_t i = 0; i < s.numel(); ++i)
              s.data<double>()[i] -= kLr * gr.data<double>()[i];
          }
        }
        u->ZeroShardGrads();
      }
      // The reference: the same step alone on the global batch.
      Params sum;
      for (int micro = 0; micro < config.accumulate; ++micro) {
        Params seen = reference;
        if (config.param_dtype) {
          seen.w1 = Round(seen.w1, *config.param_dtype);
          seen.b1 = Round(seen.b1, *config.param_dtype);
          seen.w2 = Round(seen.w2, *config.param_dtype);
          seen.b2 = Round(seen.b2, *config.param_dtype);
        }
        const int batch = step * config.accumulate + micro;
        Params g = config.param_dtype
                       ? LowPrecisionMean(seen, batch, compute, low,
                                          hybrid ? node_size_ : size_)
                       : Grads(seen, 0, size_ * kLocalBatch, batch);
        auto add = [](std::vector<double>& acc, const std::vector<double>& v) {
          if (acc.empty()) acc.assign(v.size(), 0);
          for (size_t i = 0; i < v.size(); ++i) acc[i] += v[i];
        };
        add(sum.w1, g.w1);
        add(sum.b1, g.b1);
        add(sum.w2, g.w2);
        add(sum.b2, g.b2);
      }
      auto sgd = [](std::vector<double>& v, const std::vector<double>& g,
                    bool f32) {
        for (size_t i = 0; i < v.size(); ++i) {
          v[i] -= kLr * g[i];
          if (f32) v[i] = static_cast<float>(v[i]);
        }
      };
      sgd(reference.w1, sum.w1, true);
      sgd(reference.b1, sum.b1, true);
      sgd(reference.w2, sum.w2, true);
      sgd(reference.b2, sum.b2, false);
    }
    // Compare: the full state dict against the reference.
    std::vector<float> fw1(w1.size()), fb1(b1.size()), fw2(w2.size());
    std::vector<double> fb2(b2.size());
    CheckOk(ua.GatherFullParams(
                {TensorRef(fw1.data(), fw1.size(), DataType::kFloat32),
                 TensorRef(fb1.data(), fb1.size(), DataType::kFloat32)}),
            name + ": gather a");
    CheckOk(ub.GatherFullParams(
                {TensorRef(fw2.data(), fw2.size(), DataType::kFloat32),
                 TensorRef(fb2.data(), fb2.size(), DataType::kFloat64)}),
            name + ": gather b");
    // float32: the reference trains alone on the global batch; only the
    // summation order differs. Mixed precision: the reference rounds as the
    // unit does (gathered parameters, gradients in param_dtype, the
    // pre-divided sum in reduce_dtype, rank by rank), so what remains is the
    // order of the low-precision sums: a few units in the last place of a
    // gradient (2^-11 float16, 2^-8 bfloat16), scaled by lr x |grad| /
    // |param| (~0.05) and 6 steps: bounds 1e-4 (float16), 5e-4 (bfloat16).
    const DataType lowest =
        ElementSize(compute) < ElementSize(low) ? compute : low;
    const double tol = lowest == DataType::kFloat16    ? 1e-4
                       : lowest == DataType::kBFloat16 ? 5e-4
                                                       : 1e-5;
    const std::vector<std::pair<std::string, double>> diffs = {
        {"w1", RelativeDifference(ToDouble(TensorRef(fw1.data(), fw1.size(),
                                                     DataType::kFloat32)),
                                  reference.w1)},
        {"b1", RelativeDifference(ToDouble(TensorRef(fb1.data(), fb1.size(),
                                                     DataType::kFloat32)),
                                  reference.b1)},
        {"w2", RelativeDifference(ToDouble(TensorRef(fw2.data(), fw2.size(),
                                                     DataType::kFloat32)),
                                  reference.w2)},
        {"b2", RelativeDifference(fb2, reference.b2)}};
    double worst = 0;
    for (const auto& [what, d] : diffs) {
      Check(d <= tol, absl::StrCat(name, ": ", what, " differs from training ",
                                   "alone on the global batch by ", d,
                                   " (bound ", tol, ")"));
      worst = std::max(worst, d);
    }
    // Training moved the parameters (a test that cannot fail is no test).
    Check(RelativeDifference(reference.w1, InitialParams(0).w1) > 1e-3,
          name + ": the parameters moved");
    if (rank_ == 0) {
      std::printf("%-40s worst relative difference %.2e (bound %.0e)\n",
                  name.c_str(), worst, tol);
    }
    if (config.strategy == ShardingStrategy::kFullShard &&
        !config.param_dtype && config.accumulate == 1 && !config.offload) {
      StateDicts(ua, {fw1, fb1});
    }
    if (hybrid && !config.param_dtype && config.accumulate == 1) {
      HybridRank0Gather(ua, {fw1, fb1}, name);
    }
  }

  // HYBRID_*: a rank-0-only gather writes the job's rank 0's outputs alone;
  // the others (also the other nodes' group rank 0) pass empty outputs, as
  // FSDP's FullStateDict(rank0_only) does, and succeed. (Before, another
  // node's group rank 0 wrote, or failed on its empty outputs.)
  void HybridRank0Gather(FlatShard& u,
                         const std::vector<std::vector<float>>& want,
                         const std::string& name) {
    const bool job_rank0 = rank_ == 0;
    std::vector<float> w(want[0].size(), -1), b(want[1].size(), -1);
    std::vector<TensorRef> outs(2);
    if (job_rank0) {
      outs = {TensorRef(w.data(), w.size(), DataType::kFloat32),
              TensorRef(b.data(), b.size(), DataType::kFloat32)};
    }
    CheckOk(u.GatherFullParams(outs, /*rank0_only=*/true),
            name + ": rank-0-only gather, empty outputs off the job's rank 0");
    if (job_rank0) {
      Check(w == want[0] && b == want[1],
            name + ": the job's rank 0 gets the full values");
    }
  }

  // The global gradient as a mixed-precision unit computes it: each rank's
  // mean gradient rounded to the compute dtype, then to the reduce dtype,
  // pre-divided by the world size and summed in it: rank by rank inside each
  // group of `node` ranks, then node by node (HYBRID_*'s two reductions).
  Params LowPrecisionMean(const Params& seen, int batch, DataType compute,
                          DataType reduce, int node) const {
    auto add = [&](std::vector<double>& acc, const std::vector<double>& v) {
      if (acc.empty()) {
        acc = v;
        return;
      }
      for (size_t i = 0; i < v.size(); ++i) acc[i] += v[i];
      acc = Round(acc, reduce);
    };
    auto part = [&](const std::vector<double>& g) {
      std::vector<double> v = Round(Round(g, compute), reduce);
      for (double& x : v) x /= size_;
      return Round(v, reduce);
    };
    Params total;
    for (int first = 0; first < size_; first += node) {
      Params sum;
      for (int r = first; r < first + node; ++r) {
        const Params g = Grads(seen, r * kLocalBatch, kLocalBatch, batch);
        add(sum.w1, part(g.w1));
        add(sum.b1, part(g.b1));
        add(sum.w2, part(g.w2));
        add(sum.b2, part(g.b2));
      }
      add(total.w1, sum.w1);
      add(total.b1, sum.b1);
      add(total.w2, sum.w2);
      add(total.b2, sum.b2);
    }
    return total;
  }

  // Full (all ranks, rank 0 only) and sharded state dicts of unit `u` whose
  // trained float32 values are `want`; the sharded one is loaded again at
  // half the ranks.
  void StateDicts(FlatShard& u, const std::vector<std::vector<float>>& want) {
    std::vector<float> w(want[0].size(), -1), b(want[1].size(), -1);
    CheckOk(
        u.GatherFullParams({TensorRef(w.data(), w.size(), DataType::kFloat32),
                            TensorRef(b.data(), b.size(), DataType::kFloat32)},
                           /*rank0_only=*/true),
        "rank-0-only gather");
    Check(rank_ == 0 ? w == want[0] && b == want[1]
                     : w == std::vector<float>(w.size(), -1),
          "rank-0-only full state dict");
    // Load different values (rank 0's), gather them back.
    std::vector<float> w2 = want[0], b2 = want[1];
    for (float& x : w2) x += 1;
    for (float& x : b2) x -= 1;
    std::vector<TensorRef> values;
    if (rank_ == 0) {
      values = {TensorRef(w2.data(), w2.size(), DataType::kFloat32),
                TensorRef(b2.data(), b2.size(), DataType::kFloat32)};
    }
    CheckOk(u.LoadFullParams(values, /*rank0_only=*/true), "load rank 0's");
    // Loads are refused while unsharded: the full parameters would keep the
    // old values.
    RequireOk(u.Unshard(), "unshard before loading");
    absl::Status unsharded = u.LoadFullParams(values);
    Check(unsharded.code() == absl::StatusCode::kFailedPrecondition &&
              unsharded.message() ==
                  "FlatShard: load a state dict while unsharded",
          "load a full state dict while unsharded: " + unsharded.ToString());
    unsharded = u.LoadShardedParams(u.Metadata(),
                                    [](int, int) -> absl::StatusOr<TensorRef> {
                                      return absl::InternalError("not read");
                                    });
    Check(unsharded.code() == absl::StatusCode::kFailedPrecondition &&
              unsharded.message() ==
                  "FlatShard: load a sharded checkpoint while unsharded",
          "load a sharded checkpoint while unsharded: " + unsharded.ToString());
    RequireOk(u.Reshard(), "reshard after the refused loads");
    CheckOk(
        u.GatherFullParams({TensorRef(w.data(), w.size(), DataType::kFloat32),
                            TensorRef(b.data(), b.size(), DataType::kFloat32)}),
        "gather after load");
    std::vector<float> rw2 = want[0], rb2 = want[1];
    for (float& x : rw2) x += 1;
    for (float& x : rb2) x -= 1;
    Check(w == rw2 && b == rb2, "a full state dict round-trips exactly");
    // A sharded load whose read fails (a missing file) changes nothing.
    absl::Status failed = u.LoadShardedParams(
        u.Metadata(), [](int, int) -> absl::StatusOr<TensorRef> {
          return absl::NotFoundError("no such file");
        });
    Check(failed.code() == absl::StatusCode::kNotFound,
          "a sharded load whose read fails: " + failed.ToString());
    CheckOk(
        u.GatherFullParams({TensorRef(w.data(), w.size(), DataType::kFloat32),
                            TensorRef(b.data(), b.size(), DataType::kFloat32)}),
        "gather after a failed sharded load");
    Check(w == rw2 && b == rb2,
          "a sharded load whose read fails leaves the shards as they were");

    // Sharded: every rank writes its shards; a unit over half the ranks
    // (at least one) loads them and must hold the same values.
    const FlatShard::ShardMetadata meta = u.Metadata();
    const std::string dir = std::getenv("TEST_TMPDIR") != nullptr
                                ? std::getenv("TEST_TMPDIR")
                                : "/tmp";
    const std::string job = std::getenv("DISTKIT_STORE") != nullptr
                                ? std::to_string(std::hash<std::string>()(
                                      std::getenv("DISTKIT_STORE")))
                                : "job";
    auto path = [&](int flat, int r) {
      return absl::StrCat(dir, "/flat_shard_", job, "_", flat, "_", r, ".bin");
    };
    for (int k = 0; k < u.num_flat(); ++k) {
      std::ofstream out(path(k, rank_), std::ios::binary);
      out.write(static_cast<const char*>(u.Shard(k).data()),
                u.Shard(k).nbytes());
    }
    RequireOk(world_->Barrier(), "barrier after saving");
    std::vector<int> half;
    for (int r = 0; r < std::max(1, size_ / 2); ++r) half.push_back(r);
    auto sub = world_->NewGroup(half);
    RequireOk(sub.status(), "half group");
    if ((*sub)->is_member()) {
      std::vector<float> w3(w.size(), 0), b3(b.size(), 0);
      auto fresh = FlatShard::Create(
          *sub,
          {{TensorRef(w3.data(), w3.size(), DataType::kFloat32), "w1"},
           {TensorRef(b3.data(), b3.size(), DataType::kFloat32), "b1"}},
          {});
      RequireOk(fresh.status(), "unit over half the ranks");
      std::vector<char> bytes;
      CheckOk((*fresh)->LoadShardedParams(
                  meta,
                  [&](int flat, int r) -> absl::StatusOr<TensorRef> {
                    const std::string data =
                        testing::FileContents(path(flat, r));
                    bytes.assign(data.begin(), data.end());
                    return TensorRef(bytes.data(), bytes.size() / sizeof(float),
                                     DataType::kFloat32);
                  }),
              "load the sharded checkpoint at half the ranks");
      CheckOk((*fresh)->GatherFullParams(
                  {TensorRef(w3.data(), w3.size(), DataType::kFloat32),
                   TensorRef(b3.data(), b3.size(), DataType::kFloat32)}),
              "gather the re-sharded unit");
      Check(w3 == rw2 && b3 == rb2,
            absl::StrCat("a sharded checkpoint saved at ", size_,
                         " ranks loads exactly at ", half.size()));
      // Another unit's checkpoint is refused, naming the difference.
      FlatShard::ShardMetadata other = meta;
      other.param_numel[0] += 1;
      absl::Status s = (*fresh)->LoadShardedParams(
          other, [](int, int) -> absl::StatusOr<TensorRef> {
            return absl::InternalError("not read");
          });
      Check(s.code() == absl::StatusCode::kInvalidArgument &&
                s.message() ==
                    "FlatShard: the checkpoint is of another unit (2 "
                    "parameters in 1 flat buffers; this unit has 2 in 1, "
                    "with different sizes or dtypes)",
            "another unit's checkpoint: " + s.ToString());
    }
    RequireOk(world_->Barrier(), "barrier after loading");
  }

  // Ranks that register different parameters all get the same error, and
  // nothing is left half-built.
  void Misuse() {
    std::vector<float> v(size_ > 1 && rank_ == size_ - 1 ? 7 : 8, 1.f);
    auto unit = FlatShard::Create(
        world_, {{TensorRef(v.data(), v.size(), DataType::kFloat32), "w"}}, {});
    if (size_ > 1) {
      Check(unit.status().code() == absl::StatusCode::kInvalidArgument &&
                unit.status().message() ==
                    absl::StrCat("FlatShard on group 'world': parameter 0 ('w' "
                                 "on rank ",
                                 rank_,
                                 ") differs across ranks: rank 0 has float32 x "
                                 "8, rank ",
                                 size_ - 1, " has float32 x 7"),
            "mismatched parameters: " + unit.status().ToString());
    } else {
      Require(unit.ok(), "one rank cannot disagree");
      Check((*unit)->FullParam(0).status().code() ==
                absl::StatusCode::kFailedPrecondition,
            "FullParam before Unshard");
    }
    std::vector<int32_t> ints(4);
    auto bad = FlatShard::Create(
        world_, {{TensorRef(ints.data(), 4, DataType::kInt32), "steps"}}, {});
    // Every rank has the problem, so every rank names itself and why.
    Check(bad.status().message() ==
              absl::StrCat("FlatShard on group 'world': rank ", rank_,
                           " cannot shard its parameters (steps is int32; "
                           "only floating-point parameters are sharded)"),
          "integer parameters: " + bad.status().ToString());
    FlatShard::Options hybrid;
    hybrid.strategy = ShardingStrategy::kHybridShard;
    if (replicate_ != nullptr && replicate_->size() > 1) {
      // A problem on the last rank alone: its node finds it, the other nodes
      // learn it through the replicate groups, and no rank waits for another
      // (a rank left in the replicate group's agreement would time out).
      FlatShard::Options odd = hybrid;
      odd.replicate_group = replicate_;
      if (rank_ == size_ - 1) odd.param_dtype = DataType::kInt32;
      std::vector<float> w(8, 1.f);
      auto unit = FlatShard::Create(
          node_, {{TensorRef(w.data(), w.size(), DataType::kFloat32), "w"}},
          odd);
      Check(unit.status().code() == absl::StatusCode::kInvalidArgument &&
                absl::StrContains(unit.status().message(),
                                  "mixed precision dtype int32 is not "
                                  "floating point"),
            "hybrid, a problem on one rank: " + unit.status().ToString());
    }
    auto lone = FlatShard::Create(
        world_, {{TensorRef(v.data(), v.size(), DataType::kFloat32), "w"}},
        hybrid);
    Check(lone.status().message() ==
              "FlatShard: HYBRID_SHARD needs a replicate group (one rank per "
              "node)",
          "hybrid without a replicate group");
    Check(ParseShardingStrategy("FULL").status().message() ==
              "unknown sharding strategy 'FULL' (FULL_SHARD, SHARD_GRAD_OP, "
              "NO_SHARD, HYBRID_SHARD, _HYBRID_SHARD_ZERO2)",
          "unknown strategy name");
    Check(*ParseShardingStrategy("_HYBRID_SHARD_ZERO2") ==
              ShardingStrategy::kHybridShardZero2,
          "strategy names");
    RequireOk(world_->Barrier(), "barrier after misuse");
  }

 private:
  std::shared_ptr<ProcessGroup> world_, node_, replicate_;
  int rank_ = 0, size_ = 1, node_size_ = 1;
};

}  // namespace
}  // namespace distkit

namespace distkit {
namespace {

// The shard gradient accumulates across reductions until ZeroShardGrads:
// added to when it holds values, written directly when it is zero.
void ShardGradAccumulates(std::shared_ptr<ProcessGroup> world) {
  const int n = world->size();
  std::vector<float> value(4 * n, 0.5f);
  auto unit = FlatShard::Create(
      world, {{TensorRef(value.data(), value.size(), DataType::kFloat32), "v"}},
      {});
  RequireOk(unit.status(), "accumulate: create");
  std::vector<float> grad(4 * n, static_cast<float>(world->rank() + 1));
  const float mean = (n + 1) / 2.0f;
  for (float before : {0.0f, 1.0f, 0.0f}) {
    TensorRef g = (*unit)->ShardGrad(0);
    for (int64_t i = 0; i < g.numel(); ++i) g.data<float>()[i] = before;
    RequireOk((*unit)->AccumulateGrad(
                  0, TensorRef(grad.data(), grad.size(), DataType::kFloat32)),
              "accumulate: grad");
    RequireOk((*unit)->ReduceScatterGrads(), "accumulate: reduce");
    for (int64_t i = 0; i < g.numel(); ++i) {
      if (g.data<float>()[i] != before + mean) {
        Check(false,
              absl::StrCat("accumulate: shard gradient ", g.data<float>()[i],
                           ", expected ", before + mean));
        break;
      }
    }
  }
}

// Frozen parameters (no gradient) share no flat buffer with trainable ones
// of their dtype: theirs has no gradient and is never reduced, while they
// are gathered as the others. A rank that marks another parameter frozen
// is refused on every rank, naming it.
void FrozenFlat(std::shared_ptr<ProcessGroup> world) {
  const int n = world->size();
  const int rank = world->rank();
  // a (trainable) 3n+1, b (frozen) 2n+1, c (trainable) 5: a and c share a
  // flat, b has its own.
  std::vector<float> a(3 * n + 1), b(2 * n + 1), c(5);
  for (size_t i = 0; i < a.size(); ++i) a[i] = 0.5f * i;
  for (size_t i = 0; i < b.size(); ++i) b[i] = 100.0f + i;
  for (size_t i = 0; i < c.size(); ++i) c[i] = -1.0f - i;
  auto param = [](std::vector<float>& v, const char* name, bool frozen) {
    return FlatShard::Parameter{
        TensorRef(v.data(), v.size(), DataType::kFloat32), name, frozen};
  };
  auto unit = FlatShard::Create(
      world, {param(a, "a", false), param(b, "b", true), param(c, "c", false)},
      {});
  RequireOk(unit.status(), "frozen: create");
  FlatShard& u = **unit;
  Check(u.num_flat() == 2 && u.placement(0).flat == 0 &&
            u.placement(1).flat == 1 && u.placement(2).flat == 0 &&
            u.placement(2).offset == a.size() && !u.flat_frozen(0) &&
            u.flat_frozen(1),
        "frozen: a and c in flat 0, b alone in a frozen flat 1");
  Check(u.ShardGrad(1).data() == nullptr && u.ShardGrad(1).numel() == 0 &&
            u.Piece(1).grad.data() == nullptr,
        "frozen: the frozen flat has no gradient");
  Check(
      u.FullGrad(1).status().code() == absl::StatusCode::kFailedPrecondition &&
          absl::StrContains(u.FullGrad(1).status().message(), "b is frozen"),
      absl::StrCat("frozen: FullGrad of b: ",
                   u.FullGrad(1).status().ToString()));
  std::vector<float> ga(a.size(), static_cast<float>(rank + 1));
  std::vector<float> gc(c.size(), 2.0f * (rank + 1));
  CheckOk(
      u.AccumulateGrad(0, TensorRef(ga.data(), ga.size(), DataType::kFloat32)),
      "frozen: gradient of a");
  CheckOk(
      u.AccumulateGrad(2, TensorRef(gc.data(), gc.size(), DataType::kFloat32)),
      "frozen: gradient of c");
  std::vector<float> gb(b.size(), 1.0f);
  Check(u.AccumulateGrad(1, TensorRef(gb.data(), gb.size(), DataType::kFloat32))
                .code() == absl::StatusCode::kFailedPrecondition,
        "frozen: AccumulateGrad of b refused");
  RequireOk(u.ReduceScatterGrads(), "frozen: reduce");
  // The mean over ranks of (r + 1) is (n + 1) / 2; c's twice that.
  const float mean = (n + 1) / 2.0f;
  FlatShard::LocalPiece pa = u.Piece(0), pc = u.Piece(2);
  for (int64_t i = 0; i < pa.numel; ++i) {
    if (pa.grad.data<float>()[i] != mean) {
      Check(false, absl::StrCat("frozen: a's gradient ",
                                pa.grad.data<float>()[i], ", expected ", mean));
      break;
    }
  }
  for (int64_t i = 0; i < pc.numel; ++i) {
    if (pc.grad.data<float>()[i] != 2 * mean) {
      Check(false,
            absl::StrCat("frozen: c's gradient ", pc.grad.data<float>()[i],
                         ", expected ", 2 * mean));
      break;
    }
  }
  // Gathered whole, the frozen one too.
  RequireOk(u.Unshard(), "frozen: unshard");
  auto full_b = u.FullParam(1);
  RequireOk(full_b.status(), "frozen: full b");
  Check(ToDouble(*full_b) ==
            ToDouble(TensorRef(b.data(), b.size(), DataType::kFloat32)),
        "frozen: b gathered whole");
  CheckOk(u.Reshard(), "frozen: reshard");
  // Ranks that disagree on which parameter is frozen.
  if (n > 1) {
    auto mixed =
        FlatShard::Create(world,
                          {param(a, "a", false), param(b, "b", rank == n - 1),
                           param(c, "c", false)},
                          {});
    Check(mixed.status().code() == absl::StatusCode::kInvalidArgument &&
              absl::StrContains(mixed.status().message(), "(frozen)") &&
              absl::StrContains(mixed.status().message(), "'b'"),
          absl::StrCat("frozen: disagreement refused: ",
                       mixed.status().ToString()));
  }
}

// A StartUnshard / StartReduceScatterGrads that fails on its second flat
// buffer (an injected allocation failure, on every rank), after the first
// one's collective was launched: it waits for that collective and frees
// what it allocated (held bytes back to the shards), and the unit works
// on: the retry gathers the right values, a reduction averages.
void StartFailsPartway(std::shared_ptr<ProcessGroup> world) {
  const int n = world->size();
  if (n < 2) return;  // one rank launches nothing
  std::vector<float> a(3 * n + 1);
  std::vector<double> b(2 * n + 1);
  for (size_t i = 0; i < a.size(); ++i) a[i] = 0.5f * i;
  for (size_t i = 0; i < b.size(); ++i) b[i] = -1.0 - i;
  auto unit = FlatShard::Create(
      world,
      {{TensorRef(a.data(), a.size(), DataType::kFloat32), "a"},
       {TensorRef(b.data(), b.size(), DataType::kFloat64), "b"}},
      {});
  RequireOk(unit.status(), "partway: create");
  FlatShard& u = **unit;
  Require(u.num_flat() == 2, "partway: two flat buffers");
  const size_t sharded = u.held_bytes();
  // StartUnshard allocates flat 0's full buffer, launches its gather, then
  // allocates flat 1's: that one fails.
  FlatShard::FailAllocationForTesting(2);
  absl::Status s = u.StartUnshard();
  FlatShard::FailAllocationForTesting(0);
  Check(s.code() == absl::StatusCode::kResourceExhausted,
        "partway: StartUnshard fails: " + s.ToString());
  Check(!u.is_unsharded() && u.held_bytes() == sharded,
        absl::StrCat("partway: after the failed StartUnshard the unit holds ",
                     u.held_bytes(), " bytes, its shards ", sharded));
  RequireOk(u.Unshard(), "partway: unshard again");
  auto full_a = u.FullParam(0);
  auto full_b = u.FullParam(1);
  RequireOk(full_a.status(), "partway: full a");
  RequireOk(full_b.status(), "partway: full b");
  Check(ToDouble(*full_a) ==
                ToDouble(TensorRef(a.data(), a.size(), DataType::kFloat32)) &&
            ToDouble(*full_b) ==
                ToDouble(TensorRef(b.data(), b.size(), DataType::kFloat64)),
        "partway: the retried gather has every value");
  CheckOk(u.Reshard(), "partway: reshard");
  // The reduction: nonzero shard gradients, so each flat allocates an
  // output buffer; flat 1's fails.
  std::vector<float> ga(a.size(), static_cast<float>(world->rank() + 1));
  std::vector<double> gb(b.size(), 2.0 * (world->rank() + 1));
  auto set_shard_grads = [&](double v) {
    TensorRef g0 = u.ShardGrad(0), g1 = u.ShardGrad(1);
    for (int64_t i = 0; i < g0.numel(); ++i) g0.data<float>()[i] = v;
    for (int64_t i = 0; i < g1.numel(); ++i) g1.data<double>()[i] = v;
  };
  auto accumulate = [&] {
    RequireOk(u.AccumulateGrad(
                  0, TensorRef(ga.data(), ga.size(), DataType::kFloat32)),
              "partway: gradient of a");
    RequireOk(u.AccumulateGrad(
                  1, TensorRef(gb.data(), gb.size(), DataType::kFloat64)),
              "partway: gradient of b");
  };
  set_shard_grads(1.0);
  accumulate();
  FlatShard::FailAllocationForTesting(2);
  s = u.StartReduceScatterGrads();
  FlatShard::FailAllocationForTesting(0);
  Check(s.code() == absl::StatusCode::kResourceExhausted,
        "partway: StartReduceScatterGrads fails: " + s.ToString());
  Check(!u.is_reducing() && u.held_bytes() == sharded,
        absl::StrCat("partway: after the failed reduction the unit holds ",
                     u.held_bytes(), " bytes, its shards ", sharded));
  set_shard_grads(1.0);
  accumulate();
  RequireOk(u.ReduceScatterGrads(), "partway: reduce again");
  const double mean = (n + 1) / 2.0;
  FlatShard::LocalPiece pa = u.Piece(0), pb = u.Piece(1);
  bool right = true;
  for (int64_t i = 0; i < pa.numel; ++i) {
    right = right && pa.grad.data<float>()[i] == 1.0 + mean;
  }
  for (int64_t i = 0; i < pb.numel; ++i) {
    right = right && pb.grad.data<double>()[i] == 1.0 + 2 * mean;
  }
  Check(right, "partway: the next reduction averages the gradients");
}

}  // namespace
}  // namespace distkit

int main() {
  using namespace distkit;
  setvbuf(stdout, nullptr, _IOLBF, 0);
  absl::StatusOr<testing::RankEnv> env = testing::JoinJob(absl::Seconds(60));
  testing::RequireOk(env.status(), "join the job");
  testing::SetCheckRank(env->world->rank());
  Job job(env->world);
  std::vector<Config> configs;
  for (ShardingStrategy s :
       {ShardingStrategy::kFullShard, ShardingStrategy::kShardGradOp,
        ShardingStrategy::kNoShard, ShardingStrategy::kHybridShard,
        ShardingStrategy::kHybridShardZero2}) {
    Config c;
    c.strategy = s;
    configs.push_back(c);
    c.accumulate = 2;
    configs.push_back(c);
    c.accumulate = 1;  // every strategy also with the shard offloaded
    c.offload = true;
    configs.push_back(c);
  }
  Config c;
  c.offload = true;
  configs.push_back(c);
  c.offload = false;
  c.param_dtype = DataType::kBFloat16;
  c.reduce_dtype = DataType::kFloat32;
  configs.push_back(c);
  c.param_dtype = DataType::kFloat16;
  c.reduce_dtype.reset();
  configs.push_back(c);
  c.strategy = ShardingStrategy::kHybridShard;
  c.param_dtype = DataType::kBFloat16;
  configs.push_back(c);
  for (const Config& config : configs) job.Train(config);
  job.Misuse();
  ShardGradAccumulates(env->world);
  FrozenFlat(env->world);
  StartFailsPartway(env->world);
  return testing::FinishChecks(absl::StrCat(
      "FlatShard matches training alone under every strategy, world size ",
      env->world->size()));
}
