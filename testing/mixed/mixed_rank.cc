// The C++ rank of the mixed-language job (see README.md): the C++ API.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "cc/core/tensor_ref.h"
#include "cc/dist_api/collectives.h"
#include "cc/dist_api/dist.h"
#include "cc/dist_api/object_collectives.h"
#include "cc/parallel/flat_shard.h"

namespace dk = distkit;
namespace dist = distkit::dist;

namespace {

int rank_ = -1;

void Check(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "rank %d (c++): FAILED: %s\n", rank_, what.c_str());
    std::exit(1);
  }
}
void Ok(const absl::Status& s, const std::string& what) {
  Check(s.ok(), what + ": " + s.ToString());
}

std::string Obj(int r) {
  std::string s;
  for (int k = 0; k <= r; ++k) s += "rank-" + std::to_string(r) + ";";
  return s;
}

}  // namespace

int main() {
  Ok(dist::InitDist("pytorch"), "init");
  const int r = rank_ = dist::GetRank(), n = dist::GetWorldSize();
  constexpr int N = 9;
  std::vector<int64_t> i64(N);
  std::vector<float> f32(N);
  dk::TensorRef ti(i64.data(), N, dk::DataType::kInt64);
  dk::TensorRef tf(f32.data(), N, dk::DataType::kFloat32);

  for (int i = 0; i < N; ++i) i64[i] = int64_t{r + 1} * (i + 1);
  Ok(dist::AllReduce(ti, "sum"), "sum int64");
  for (int i = 0; i < N; ++i)
    Check(i64[i] == int64_t{n} * (n + 1) / 2 * (i + 1), "sum int64");
  for (int i = 0; i < N; ++i) i64[i] = (7 * r + i) % 11;
  Ok(dist::AllReduce(ti, "max"), "max int64");
  for (int i = 0; i < N; ++i) {
    int64_t want = 0;
    for (int q = 0; q < n; ++q)
      want = std::max<int64_t>(want, (7 * q + i) % 11);
    Check(i64[i] == want, "max int64");
  }
  for (int i = 0; i < N; ++i) f32[i] = 0.5f * (r + 1) + i;
  Ok(dist::AllReduce(tf, "sum"), "sum float32");
  for (int i = 0; i < N; ++i)
    Check(f32[i] == 0.25f * n * (n + 1) + float(n) * i, "sum float32");
  for (int i = 0; i < N; ++i) f32[i] = r - 0.25f * i;
  Ok(dist::AllReduce(tf, "max"), "max float32");
  for (int i = 0; i < N; ++i)
    Check(f32[i] == (n - 1) - 0.25f * i, "max float32");
  for (int q = 0; q < n; ++q) {
    for (int i = 0; i < N; ++i) i64[i] = r == q ? 1000 * q + i : -1;
    Ok(dist::Broadcast(ti, q), "broadcast int64");
    for (int i = 0; i < N; ++i) f32[i] = r == q ? q + 0.125f * i : -1;
    Ok(dist::Broadcast(tf, q), "broadcast float32");
    for (int i = 0; i < N; ++i)
      Check(i64[i] == 1000 * q + i && f32[i] == q + 0.125f * i,
            "broadcast from " + std::to_string(q));
  }
  std::vector<int64_t> mine = {10 * r, 10 * r + 1, 10 * r + 2}, all(3 * n);
  std::vector<dk::TensorRef> outs;
  for (int q = 0; q < n; ++q)
    outs.emplace_back(all.data() + 3 * q, 3, dk::DataType::kInt64);
  Ok(dist::AllGather(dk::TensorRef(mine.data(), 3, dk::DataType::kInt64), outs),
     "all_gather");
  for (int j = 0; j < 3 * n; ++j)
    Check(all[j] == 10 * (j / 3) + j % 3, "all_gather");

  auto objs = dist::AllGatherObject(Obj(r));
  Ok(objs.status(), "all_gather_object");
  Check(int(objs->size()) == n, "all_gather_object count");
  for (int q = 0; q < n; ++q)
    Check((*objs)[q] == Obj(q), "all_gather_object " + std::to_string(q));
  auto names = dist::AllGatherObject("c++");
  Ok(names.status(), "language names");
  const std::set<std::string> known = {"c", "c++", "python", "rust", "go"};
  std::set<std::string> seen;
  std::string line;
  for (const std::string& name : *names) {
    Check(known.count(name) == 1 && seen.insert(name).second, "language names");
    line += " " + name;
  }
  std::printf("rank %d (c++): languages:%s\n", r, line.c_str());

  // 9: one model sharded across the languages (README).
  {
    std::vector<float> w(10);
    for (int i = 0; i < 10; ++i) w[i] = r == 0 ? 0.1f * i : -5.0f;
    dk::FlatShard::Options o;
    o.sync_module_states = true;
    auto unit = dk::FlatShard::Create(
        dist::GetDefaultGroup(),
        {{dk::TensorRef(w.data(), 10, dk::DataType::kFloat32), "w"}}, o);
    Ok(unit.status(), "shard");
    for (int step = 0; step < 3; ++step) {
      Ok((*unit)->Unshard(), "unshard");
      const float* full = (*unit)->FullParam(0)->data<float>();
      std::vector<float> g(10);
      for (int i = 0; i < 10; ++i) g[i] = (r + 1) * 0.1f * full[i] + 0.01f * i;
      Ok((*unit)->Reshard(), "reshard");
      Ok((*unit)->AccumulateGrad(
             0, dk::TensorRef(g.data(), 10, dk::DataType::kFloat32)),
         "accumulate");
      Ok((*unit)->ReduceScatterGrads(), "reduce");
      dk::TensorRef vals = (*unit)->Shard(0), grads = (*unit)->ShardGrad(0);
      for (int64_t i = 0; i < vals.numel(); ++i)
        vals.data<float>()[i] -= 0.5f * grads.data<float>()[i];
      (*unit)->ZeroShardGrads();
    }
    Ok((*unit)->GatherFullParams(
           {dk::TensorRef(w.data(), 10, dk::DataType::kFloat32)}),
       "gather");
    for (int i = 0; i < 10; ++i) {
      double want = 0.1 * i;
      for (int step = 0; step < 3; ++step)
        want -= 0.5 * (0.1 * want * (n + 1) / 2.0 + 0.01 * i);
      Check(std::fabs(w[i] - want) <= 1e-5 * std::max(1.0, std::fabs(want)),
            "sharded training");
    }
  }
  // 10: the C rank's bool bytes 2 and 255 arrive as 1 (README); read as
  // bytes, which a bool holding 2 could not be checked as.
  {
    const bool flags[4] = {true, true, false, true};
    std::vector<uint8_t> got(4 * n, 7);
    std::vector<dk::TensorRef> parts;
    for (int q = 0; q < n; ++q)
      parts.emplace_back(got.data() + 4 * q, 4, dk::DataType::kBool);
    Ok(dist::AllGather(
           dk::TensorRef(const_cast<bool*>(flags), 4, dk::DataType::kBool),
           parts),
       "all_gather bool");
    for (int j = 0; j < 4 * n; ++j)
      Check(got[j] == (j % 4 == 2 ? 0 : 1), "all_gather bool");
  }
  Ok(dist::Barrier(), "barrier");
  dist::DestroyDist();
  std::printf("rank %d (c++): mixed-language checks passed\n", r);
  return 0;
}
