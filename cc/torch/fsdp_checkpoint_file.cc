#include "cc/torch/fsdp_checkpoint_file.h"

#include <torch/serialize.h>

#include <fstream>
#include <iterator>
#include <vector>

#include "absl/strings/str_cat.h"

namespace distkit {
namespace fsdp_internal {
namespace {

constexpr char kOwner[] = "FullyShardedDataParallel";

}  // namespace

at::Tensor EncodeMetadata(const FlatShard::ShardMetadata& m) {
  std::vector<int64_t> v = {m.world_size,
                            static_cast<int64_t>(m.flat_dtypes.size())};
  for (size_t k = 0; k < m.flat_dtypes.size(); ++k) {
    v.push_back(static_cast<int64_t>(m.flat_dtypes[k]));
    v.push_back(m.flat_numel[k]);
  }
  v.push_back(static_cast<int64_t>(m.param_numel.size()));
  v.insert(v.end(), m.param_numel.begin(), m.param_numel.end());
  return torch::tensor(v, torch::kLong);
}

absl::StatusOr<FlatShard::ShardMetadata> DecodeMetadata(
    const at::Tensor& t, const std::string& key) {
  const torch::Tensor c = t.to(torch::kLong).contiguous();
  const int64_t* v = c.data_ptr<int64_t>();
  const int64_t n = c.numel();
  auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat(kOwner, ": the checkpoint's ", key, " is malformed"));
  };
  if (n < 2) return bad();
  FlatShard::ShardMetadata m;
  m.world_size = static_cast<int>(v[0]);
  const int64_t flats = v[1];
  if (flats < 0 || 2 + 2 * flats + 1 > n) return bad();
  for (int64_t k = 0; k < flats; ++k) {
    m.flat_dtypes.push_back(static_cast<DataType>(v[2 + 2 * k]));
    m.flat_numel.push_back(v[3 + 2 * k]);
  }
  const int64_t params = v[2 + 2 * flats];
  if (params < 0 || 3 + 2 * flats + params != n) return bad();
  m.param_numel.assign(v + 3 + 2 * flats, v + n);
  return m;
}

std::string ShardFile(const std::string& dir, int rank) {
  return absl::StrCat(dir, "/shard_rank", rank, ".pt");
}

absl::StatusOr<ShardFileContents> ReadShardFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    return absl::NotFoundError(
        absl::StrCat(kOwner, ": cannot read the checkpoint file ", path));
  }
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)),
                          std::istreambuf_iterator<char>());
  try {
    return c10::impl::toTypedDict<std::string, at::Tensor>(
        torch::pickle_load(bytes).toGenericDict());
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOwner, ": ", path, " is not a sharded checkpoint: ", e.what()));
  }
}

absl::Status WriteShardFile(const std::string& path,
                            const ShardFileContents& contents) {
  std::vector<char> bytes = torch::pickle_save(c10::IValue(contents));
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.close();
  if (!f) {
    return absl::UnavailableError(
        absl::StrCat(kOwner, ": cannot write ", path));
  }
  return absl::OkStatus();
}

}  // namespace fsdp_internal
}  // namespace distkit
