#include "cc/torch/data_device.h"

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cc/core/status.h"

namespace distkit {
namespace {

std::string TypeName(const c10::IValue& v) { return v.tagKind(); }

// The elements of a list or tuple.
std::vector<c10::IValue> Elements(const c10::IValue& v) {
  if (v.isTuple()) return v.toTupleRef().elements().vec();
  return v.toList().vec();
}

bool IsSequence(const c10::IValue& v) { return v.isList() || v.isTuple(); }

}  // namespace

absl::StatusOr<torch::Device> GetDataDevice(const c10::IValue& data) {
  if (data.isTensor()) return data.toTensor().device();
  std::vector<c10::IValue> items;
  if (data.isGenericDict()) {
    for (const auto& entry : data.toGenericDict())
      items.push_back(entry.value());
  } else if (IsSequence(data)) {
    items = Elements(data);
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "data should be a Tensor, sequence of tensor or dict, but got ",
        TypeName(data)));
  }
  std::optional<torch::Device> pre;
  for (const c10::IValue& item : items) {
    DK_ASSIGN_OR_RETURN(torch::Device cur, GetDataDevice(item));
    if (!pre.has_value()) {
      pre = cur;
    } else if (cur != *pre) {
      return absl::InvalidArgumentError(
          absl::StrCat("device type in data should be consistent, but got ",
                       cur.str(), " and ", pre->str()));
    }
  }
  if (!pre.has_value()) {
    return absl::InvalidArgumentError("data should not be empty.");
  }
  return *pre;
}

absl::StatusOr<c10::IValue> CastDataDevice(const c10::IValue& data,
                                           const torch::Device& device,
                                           const c10::IValue* out) {
  if (out != nullptr && out->tagKind() != data.tagKind()) {
    return absl::InvalidArgumentError(
        absl::StrCat("out should be the same type with data, but got data is ",
                     TypeName(data), " and out is ", TypeName(*out)));
  }
  if (data.isTensor()) {
    const torch::Tensor& t = data.toTensor();
    torch::Tensor on_device = t.device() == device ? t : t.to(device);
    if (out != nullptr) {
      torch::NoGradGuard no_grad;
      out->toTensor().copy_(on_device);
    }
    return c10::IValue(on_device);
  }
  if (data.isGenericDict()) {
    const c10::impl::GenericDict in = data.toGenericDict();
    if (out != nullptr && out->toGenericDict().size() != in.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("length of data and out should be same, but got ",
                       in.size(), " and ", out->toGenericDict().size()));
    }
    c10::impl::GenericDict result(in.keyType(), in.valueType());
    for (const auto& entry : in) {
      std::optional<c10::IValue> out_value;
      if (out != nullptr) {
        const c10::impl::GenericDict o = out->toGenericDict();
        auto it = o.find(entry.key());
        if (it == o.end()) {
          return absl::InvalidArgumentError(
              "out should have the same keys as data");
        }
        out_value = it->value();
      }
      DK_ASSIGN_OR_RETURN(
          c10::IValue cast,
          CastDataDevice(entry.value(), device,
                         out_value.has_value() ? &*out_value : nullptr));
      result.insert(entry.key(), cast);
    }
    if (result.empty()) {
      return absl::InvalidArgumentError("data should not be empty");
    }
    return c10::IValue(result);
  }
  if (IsSequence(data)) {
    const std::vector<c10::IValue> in = Elements(data);
    std::vector<c10::IValue> out_items;
    if (out != nullptr) out_items = Elements(*out);
    std::vector<c10::IValue> result;
    // mmengine zips data and out: the shorter one decides.
    const size_t n =
        out != nullptr ? std::min(in.size(), out_items.size()) : in.size();
    for (size_t i = 0; i < n; ++i) {
      DK_ASSIGN_OR_RETURN(
          c10::IValue cast,
          CastDataDevice(in[i], device,
                         out != nullptr ? &out_items[i] : nullptr));
      result.push_back(std::move(cast));
    }
    if (result.empty()) {
      return absl::InvalidArgumentError("data should not be empty");
    }
    if (data.isTuple()) return c10::IValue(c10::ivalue::Tuple::create(result));
    c10::impl::GenericList list(data.toList().elementType());
    for (c10::IValue& v : result) list.push_back(std::move(v));
    return c10::IValue(list);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("data should be a Tensor, list of tensor or dict, but got ",
                   TypeName(data)));
}

}  // namespace distkit
