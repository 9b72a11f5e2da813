#include "cc/store/gloo_store_adapter.h"

#include <gloo/common/error.h>

#include "absl/time/time.h"

namespace distkit {
namespace {

[[noreturn]] void Throw(const absl::Status& status) {
  throw gloo::IoException(status.ToString());
}

}  // namespace

GlooStoreAdapter::GlooStoreAdapter(std::shared_ptr<distkit::Store> store)
    : store_(std::move(store)) {}

void GlooStoreAdapter::set(const std::string& key,
                           const std::vector<char>& data) {
  absl::Status s =
      store_->Set(key, absl::string_view(data.data(), data.size()));
  if (!s.ok()) Throw(s);
}

std::vector<char> GlooStoreAdapter::get(const std::string& key) {
  absl::StatusOr<std::string> value = store_->Get(key);
  if (!value.ok()) Throw(value.status());
  return std::vector<char>(value->begin(), value->end());
}

void GlooStoreAdapter::wait(const std::vector<std::string>& keys) {
  absl::Status s = store_->Wait(keys);
  if (!s.ok()) Throw(s);
}

void GlooStoreAdapter::wait(const std::vector<std::string>& keys,
                            const std::chrono::milliseconds& timeout) {
  absl::Status s = store_->Wait(keys, timeout.count() > 0
                                          ? absl::Milliseconds(timeout.count())
                                          : store_->timeout());
  if (!s.ok()) Throw(s);
}

}  // namespace distkit
