#include "capi/caller_memory.h"

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "capi/arguments.h"
#include "cc/core/status.h"

namespace distkit {
namespace capi {

absl::StatusOr<char*> OwnedCopy(absl::string_view bytes) {
  char* copy = static_cast<char*>(std::malloc(bytes.size() + 1));
  if (copy == nullptr) return absl::ResourceExhaustedError("out of memory");
  std::memcpy(copy, bytes.data(), bytes.size());
  copy[bytes.size()] = '\0';
  return copy;
}

absl::Status ReturnBytes(absl::string_view bytes, void** data_out,
                         size_t* size_out) {
  DK_ASSIGN_OR_RETURN(char* copy, OwnedCopy(bytes));
  *data_out = copy;
  *size_out = bytes.size();
  return absl::OkStatus();
}

absl::Status ReturnItems(const std::vector<std::string>& items,
                         dk_bytes_t** items_out, size_t* count_out) {
  size_t total = items.size() * sizeof(dk_bytes_t);
  for (const std::string& i : items) total += i.size();
  char* block = static_cast<char*>(std::malloc(total > 0 ? total : 1));
  if (block == nullptr) return absl::ResourceExhaustedError("out of memory");
  dk_bytes_t* array = reinterpret_cast<dk_bytes_t*>(block);
  char* cursor = block + items.size() * sizeof(dk_bytes_t);
  for (size_t k = 0; k < items.size(); ++k) {
    std::memcpy(cursor, items[k].data(), items[k].size());
    array[k].data = cursor;
    array[k].size = items[k].size();
    cursor += items[k].size();
  }
  *items_out = array;
  *count_out = items.size();
  return absl::OkStatus();
}

absl::Status ReturnItems(const std::optional<std::vector<std::string>>& items,
                         dk_bytes_t** items_out, size_t* count_out) {
  if (!items.has_value()) return absl::OkStatus();
  return ReturnItems(*items, items_out, count_out);
}

absl::StatusOr<std::vector<std::string>> ReadItems(const dk_bytes_t* items,
                                                   size_t count,
                                                   const char* what) {
  DK_RETURN_IF_ERROR(CheckCount(count, sizeof(dk_bytes_t), what));
  if (count > 0 && items == nullptr)
    return absl::InvalidArgumentError(absl::StrCat(what, " is NULL"));
  std::vector<std::string> out;
  for (size_t k = 0; k < count; ++k) {
    if (items[k].size > 0 && items[k].data == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, "[", k, "].data is NULL"));
    }
    DK_RETURN_IF_ERROR(CheckCount(
        items[k].size, 1, absl::StrCat(what, "[", k, "].size").c_str()));
    out.emplace_back(static_cast<const char*>(items[k].data), items[k].size);
  }
  return out;
}

absl::Status CheckOuts(dk_bytes_t** items_out, size_t* count_out) {
  DK_RETURN_IF_ERROR(NotNull(items_out, "items_out"));
  DK_RETURN_IF_ERROR(NotNull(count_out, "count_out"));
  *items_out = nullptr;
  *count_out = 0;
  return absl::OkStatus();
}

}  // namespace capi
}  // namespace distkit
