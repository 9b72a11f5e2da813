#include "cc/dist_api/collect_results.h"

#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "cc/core/status.h"
#include "cc/dist_api/collectives.h"
#include "cc/dist_api/dist.h"
#include "cc/dist_api/internal/group_argument.h"
#include "cc/dist_api/object_collectives.h"

namespace distkit {
namespace dist {
namespace {

using internal::Resolve;

constexpr size_t kPathBufferBytes = 512;

ResultItems Truncated(const ResultItems& part, int64_t size) {
  return ResultItems(
      part.begin(), part.begin() + std::min<int64_t>(size, static_cast<int64_t>(
                                                               part.size())));
}

// A negative size would reach std::vector's size_t arithmetic (a
// length_error, or a range that ends before it starts).
absl::Status CheckSize(int64_t size) {
  if (size >= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("collect_results: size is ", size, ", must be >= 0"));
}

// Items as (int64 length, bytes) records.
std::string Encode(const ResultItems& items) {
  std::string out;
  for (const std::string& item : items) {
    const int64_t n = item.size();
    out.append(reinterpret_cast<const char*>(&n), sizeof(n));
    out += item;
  }
  return out;
}

absl::StatusOr<ResultItems> Decode(const std::string& bytes) {
  ResultItems items;
  size_t offset = 0;
  while (offset < bytes.size()) {
    int64_t n = 0;
    if (offset + sizeof(n) > bytes.size())
      return absl::DataLossError("truncated part");
    std::memcpy(&n, bytes.data() + offset, sizeof(n));
    offset += sizeof(n);
    if (n < 0 || offset + n > bytes.size())
      return absl::DataLossError("truncated part");
    items.push_back(bytes.substr(offset, n));
    offset += n;
  }
  return items;
}

}  // namespace

ResultItems InterleaveParts(const std::vector<ResultItems>& parts,
                            int64_t size) {
  ResultItems out;
  size_t longest = 0;
  for (const ResultItems& p : parts) longest = std::max(longest, p.size());
  for (size_t i = 0; i < longest; ++i) {
    for (const ResultItems& p : parts) {
      if (i < p.size() && !p[i].empty()) out.push_back(p[i]);
    }
  }
  if (static_cast<int64_t>(out.size()) > size) out.resize(size);
  return out;
}

absl::StatusOr<std::optional<ResultItems>> CollectResults(
    const ResultItems& part, int64_t size, absl::string_view device,
    std::optional<std::string> tmpdir, ProcessGroup* group) {
  DK_RETURN_IF_ERROR(CheckSize(size));
  if (device == "cpu")
    return CollectResultsCpu(part, size, std::move(tmpdir), group);
  if (device == "gpu" || device == "npu") {
    if (tmpdir.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "collect_results: tmpdir must be None on device ", device));
    }
    return CollectResultsGpu(part, size, group);
  }
  return absl::UnimplementedError(absl::StrCat(
      "collect_results: device must be cpu, gpu or npu, got ", device));
}

absl::StatusOr<std::optional<ResultItems>> CollectResultsCpu(
    const ResultItems& part, int64_t size, std::optional<std::string> tmpdir,
    ProcessGroup* group) {
  DK_RETURN_IF_ERROR(CheckSize(size));
  const std::shared_ptr<ProcessGroup> g = internal::Resolve(group);
  if (internal::Trivial(g)) {
    return std::optional<ResultItems>(Truncated(part, size));
  }
  const int rank = g->rank(), world = g->size();
  std::string dir;
  if (!tmpdir.has_value()) {
    // Rank 0 makes the directory; its path travels space-padded (all
    // spaces: rank 0 could not make one, and every rank fails alike).
    std::vector<char> path(kPathBufferBytes, ' ');
    std::string mkdtemp_error, made;
    if (rank == 0) {
      mkdir(".dist_test", 0755);
      char templ[] = ".dist_test/tmpXXXXXX";
      if (mkdtemp(templ) == nullptr) {
        mkdtemp_error = strerror(errno);
      } else {
        made = templ;
        std::memcpy(path.data(), templ, std::strlen(templ));
      }
    }
    // Through the comm device (dist::Broadcast's casting rule): NCCL takes
    // no host memory.
    const absl::Status sent = Broadcast(
        TensorRef(path.data(), path.size(), DataType::kUInt8), 0, g.get());
    if (!sent.ok()) {
      // A peer refused the call (its barrier met this broadcast) or the
      // group failed: nobody will use the directory.
      std::error_code ec;
      if (!made.empty()) std::filesystem::remove_all(made, ec);
      return sent;
    }
    dir = std::string(absl::StripTrailingAsciiWhitespace(
        std::string(path.begin(), path.end())));
    if (dir.empty()) {
      return absl::InternalError(absl::StrCat(
          "collect_results: rank 0 could not make a temporary directory",
          mkdtemp_error.empty() ? "" : " (mkdtemp: ", mkdtemp_error,
          mkdtemp_error.empty() ? "" : ")"));
    }
  } else {
    dir = *tmpdir;
    std::error_code ec;
    if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  }
  // tmpdir "" is the working directory, as os.path.join("", name) is in
  // mmengine (not the root directory).
  auto part_path = [&dir](int r) {
    return absl::StrCat(dir, dir.empty() ? "" : "/", "part_", r, ".bin");
  };
  bool written = false;
  {
    std::ofstream out(part_path(rank), std::ios::binary);
    out << Encode(part);
    written = static_cast<bool>(out);
  }
  // Every rank's part is written, or every rank fails: the least of the
  // ranks' answers (not a barrier, which a rank that refused the call before
  // it started also makes, to tell the others: a barrier here would have
  // met it as if this call had).
  // On an error from here on, what this call wrote goes: the directory it
  // made (rank 0's), or this rank's part in the caller's.
  auto discard = [&] {
    std::error_code ec;
    if (!tmpdir.has_value()) {
      std::filesystem::remove_all(dir, ec);
    } else {
      std::filesystem::remove(part_path(rank), ec);
    }
  };
  int32_t all_written = written ? 1 : 0;
  const absl::Status agreed =
      AllReduce(TensorRef(&all_written, 1, DataType::kInt32), "min", g.get());
  if (!agreed.ok()) {
    discard();
    return agreed;
  }
  if (all_written == 0) {
    std::error_code ec;
    if (!tmpdir.has_value()) std::filesystem::remove_all(dir, ec);
    return absl::InternalError(absl::StrCat(
        "collect_results: ",
        written ? "a rank could not write its part in " : "cannot write in ",
        dir));
  }
  if (rank != 0) return std::optional<ResultItems>();
  std::vector<ResultItems> parts;
  for (int r = 0; r < world; ++r) {
    std::ifstream in(part_path(r), std::ios::binary);
    if (!in) {
      discard();
      return absl::NotFoundError(absl::StrCat(
          dir, " is not an shared directory for rank ", r,
          ", please make sure ", dir, " is a shared directory for all ranks!"));
    }
    std::stringstream bytes;
    bytes << in.rdbuf();
    absl::StatusOr<ResultItems> items = Decode(bytes.str());
    if (!items.ok()) {
      discard();
      return items.status();
    }
    parts.push_back(*std::move(items));
  }
  std::error_code ec;
  if (dir.empty()) {
    // The working directory stays; only the parts go.
    for (int r = 0; r < world; ++r) std::filesystem::remove(part_path(r), ec);
  } else {
    std::filesystem::remove_all(dir, ec);
  }
  return std::optional<ResultItems>(InterleaveParts(parts, size));
}

absl::StatusOr<std::optional<ResultItems>> CollectResultsGpu(
    const ResultItems& part, int64_t size, ProcessGroup* group) {
  DK_RETURN_IF_ERROR(CheckSize(size));
  const std::shared_ptr<ProcessGroup> g = internal::Resolve(group);
  if (internal::Trivial(g)) {
    return std::optional<ResultItems>(Truncated(part, size));
  }
  DK_ASSIGN_OR_RETURN(std::vector<std::string> encoded,
                      AllGatherObject(Encode(part), group));
  if (g->rank() != 0) return std::optional<ResultItems>();
  std::vector<ResultItems> parts;
  for (const std::string& e : encoded) {
    DK_ASSIGN_OR_RETURN(ResultItems items, Decode(e));
    parts.push_back(std::move(items));
  }
  return std::optional<ResultItems>(InterleaveParts(parts, size));
}

}  // namespace dist
}  // namespace distkit
