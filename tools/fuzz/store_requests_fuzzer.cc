// libFuzzer target: the store's request handling. Bytes become a sequence of
// requests, decoded from the wire format the server receives
// (internal/wire.h) or built from fuzzed fields, checked as the client checks
// them (request_limits.h) and applied to the server's state (HashStore) beside
// a plain std::map model: every answer must equal the model's, and nothing may
// crash, overflow or hang (blocking gets use a zero timeout).
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "cc/store/hash_store.h"
#include "cc/store/internal/wire.h"
#include "cc/store/request_limits.h"

namespace {

using Model = std::map<std::string, std::string>;

[[noreturn]] void Mismatch(const char* what) {
  fprintf(stderr, "store model mismatch: %s\n", what);
  __builtin_trap();
}

void ApplySet(distkit::HashStore& store, Model& model, const std::string& k,
              const std::string& v) {
  if (!distkit::CheckStoreRequest("set", {absl::string_view(k)}, v.size())
           .ok()) {
    return;  // the client would refuse it
  }
  if (!store.Set(k, v).ok()) Mismatch("set failed");
  model[k] = v;
}

void ApplyAdd(distkit::HashStore& store, Model& model, const std::string& k,
              int64_t delta) {
  absl::StatusOr<int64_t> got = store.Add(k, delta);
  int64_t current = 0;
  auto it = model.find(k);
  if (it != model.end() && !absl::SimpleAtoi(it->second, &current)) {
    if (got.ok()) Mismatch("add on a non-integer succeeded");
    return;
  }
  int64_t sum;
  if (__builtin_add_overflow(current, delta, &sum)) {
    if (got.ok()) Mismatch("an overflowing add succeeded");
    return;
  }
  if (!got.ok() || *got != sum) Mismatch("add result");
  model[k] = std::to_string(sum);
}

void CheckGet(distkit::HashStore& store, const Model& model,
              const std::vector<std::string>& keys) {
  absl::StatusOr<std::vector<std::string>> got =
      store.MultiGetWithTimeout(keys, absl::ZeroDuration());
  bool all = true;
  for (const std::string& k : keys) all &= model.count(k) > 0;
  if (got.ok() != all) Mismatch("multi_get presence");
  if (got.ok()) {
    for (size_t i = 0; i < keys.size(); ++i) {
      if ((*got)[i] != model.at(keys[i])) Mismatch("multi_get value");
    }
  }
  absl::StatusOr<bool> ready = store.Check(keys);
  if (!ready.ok() || *ready != all) Mismatch("check");
}

// A decoded request applied as the server applies it.
void ApplyDecoded(distkit::HashStore& store, Model& model,
                  const distkit::store_wire::Request& req) {
  using distkit::store_wire::Op;
  size_t value_bytes = 0;
  for (const std::string& v : req.values) value_bytes += v.size();
  if (!distkit::CheckStoreRequest("request", req.keys, value_bytes).ok())
    return;  // the server refuses it
  switch (req.op) {
    case Op::kSet:
      ApplySet(store, model, req.keys[0], req.values[0]);
      break;
    case Op::kAdd:
      ApplyAdd(store, model, req.keys[0], req.number);
      break;
    case Op::kMultiSet: {
      if (!store.MultiSet(req.keys, req.values).ok()) Mismatch("multi_set");
      for (size_t i = 0; i < req.keys.size(); ++i)
        model[req.keys[i]] = req.values[i];
      break;
    }
    case Op::kMultiGet:
    case Op::kWait:
    case Op::kCheck:
      if (!req.keys.empty()) CheckGet(store, model, req.keys);
      break;
    default:
      break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  distkit::HashStore store;
  Model model;
  while (in.remaining_bytes() > 0) {
    const int op = in.ConsumeIntegralInRange<int>(0, 8);
    const std::string key = in.ConsumeRandomLengthString(32);
    switch (op) {
      case 0:
        ApplySet(store, model, key, in.ConsumeRandomLengthString(64));
        break;
      case 1:
        ApplyAdd(store, model, key, in.ConsumeIntegral<int64_t>());
        break;
      case 2: {
        const std::string expected = in.ConsumeRandomLengthString(16);
        const std::string desired = in.ConsumeRandomLengthString(16);
        absl::StatusOr<std::string> got =
            store.CompareSet(key, expected, desired);
        auto it = model.find(key);
        std::string want;
        if ((it == model.end() && expected.empty()) ||
            (it != model.end() && it->second == expected)) {
          model[key] = desired;
          want = desired;
        } else {
          want = it == model.end() ? expected : it->second;
        }
        if (!got.ok() || *got != want) Mismatch("compare_set");
        break;
      }
      case 3: {
        absl::StatusOr<bool> deleted = store.DeleteKey(key);
        if (!deleted.ok() || *deleted != (model.erase(key) > 0))
          Mismatch("delete_key");
        break;
      }
      case 4: {
        absl::StatusOr<int64_t> n = store.NumKeys();
        if (!n.ok() || *n != static_cast<int64_t>(model.size()))
          Mismatch("num_keys");
        break;
      }
      case 5: {
        std::vector<std::string> keys{key};
        const int extra = in.ConsumeIntegralInRange<int>(0, 3);
        for (int i = 0; i < extra; ++i)
          keys.push_back(in.ConsumeRandomLengthString(32));
        CheckGet(store, model, keys);
        break;
      }
      case 6: {
        const std::string more = in.ConsumeRandomLengthString(64);
        if (!store.Append(key, more).ok()) Mismatch("append");
        model[key] += more;
        break;
      }
      case 7: {  // a request off the wire, as the server decodes it
        const std::string body = in.ConsumeRandomLengthString(256);
        absl::StatusOr<distkit::store_wire::Request> req =
            distkit::store_wire::DecodeRequest(body);
        if (!req.ok()) break;
        // What decodes re-encodes to the same bytes.
        std::string frame;
        distkit::store_wire::EncodeRequest(*req, &frame);
        if (frame.substr(distkit::store_wire::kHeaderBytes) != body)
          Mismatch("decode / encode round trip");
        ApplyDecoded(store, model, *req);
        break;
      }
      default: {  // the client's checks on arbitrary keys and sizes
        const size_t value_bytes = in.ConsumeIntegral<size_t>();
        absl::Status s = distkit::CheckStoreRequest(
            "set", {absl::string_view(key)}, value_bytes);
        if (value_bytes > distkit::MaxStoreRequestBytes() && s.ok())
          Mismatch("an oversized request passed the check");
        break;
      }
    }
  }
  return 0;
}
