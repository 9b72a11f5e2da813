// PrefixStore gives a component its own namespace in a shared Store: every key
// is stored as "<prefix>/<key>". Groups use one each, so that two groups' keys
// never collide.

#ifndef DISTKIT_CC_STORE_PREFIX_STORE_H_
#define DISTKIT_CC_STORE_PREFIX_STORE_H_

#include <memory>
#include <string>
#include <vector>

#include "cc/store/store.h"

namespace distkit {

class PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> base);

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;
  absl::StatusOr<std::string> CompareSet(absl::string_view key,
                                         absl::string_view expected,
                                         absl::string_view desired) override;
  absl::Status WaitWithTimeout(absl::Span<const std::string> keys,
                               absl::Duration timeout) override;
  absl::StatusOr<bool> Check(absl::Span<const std::string> keys) override;
  absl::StatusOr<bool> DeleteKey(absl::string_view key) override;
  absl::StatusOr<int64_t> NumKeys() override;
  absl::StatusOr<std::vector<std::string>> MultiGetWithTimeout(
      absl::Span<const std::string> keys, absl::Duration timeout) override;
  absl::Status MultiSet(absl::Span<const std::string> keys,
                        absl::Span<const std::string> values) override;
  absl::Status Append(absl::string_view key, absl::string_view value) override;
  std::string ServerAddress() const override { return base_->ServerAddress(); }

  const std::string& prefix() const { return prefix_; }
  const std::shared_ptr<Store>& base() const { return base_; }

 private:
  std::string Key(absl::string_view key) const;
  std::vector<std::string> Keys(absl::Span<const std::string> keys) const;

  std::string prefix_;
  std::shared_ptr<Store> base_;
};

}  // namespace distkit

#endif  // DISTKIT_CC_STORE_PREFIX_STORE_H_
