// GlooStoreAdapter lets Gloo rendezvous through a distkit Store: it implements
// gloo::rendezvous::Store on top of any Store (normally a PrefixStore over the
// job's TcpStore). Gloo reports failures by exception, so a failed Store call
// is thrown as gloo::IoException carrying the Status text; the Gloo backend
// catches it at its boundary and turns it back into a Status.

#ifndef DISTKIT_CC_STORE_GLOO_STORE_ADAPTER_H_
#define DISTKIT_CC_STORE_GLOO_STORE_ADAPTER_H_

#include <gloo/rendezvous/store.h>

#include <memory>
#include <string>
#include <vector>

#include "cc/store/store.h"

namespace distkit {

class GlooStoreAdapter : public gloo::rendezvous::Store {
 public:
  explicit GlooStoreAdapter(std::shared_ptr<distkit::Store> store);

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  std::shared_ptr<distkit::Store> store_;
};

}  // namespace distkit

#endif  // DISTKIT_CC_STORE_GLOO_STORE_ADAPTER_H_
