#include "cc/store/internal/wire.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "cc/core/enum_names.h"

namespace distkit {
namespace store_wire {
namespace {

void PutList(std::string* out, const std::vector<std::string>& list) {
  PutU32(out, static_cast<uint32_t>(list.size()));
  for (const std::string& s : list) PutString(out, s);
}

// A count can claim at most one entry per remaining 4 bytes (each entry has
// a length). An entry in memory is bigger than 4 bytes (a std::string), so
// the reserve is cut to what the remaining bytes would take as strings: a
// hostile count cannot make the server's one thread allocate (or throw
// bad_alloc) for more than the frame holds.
std::vector<std::string> GetList(Reader& r, size_t remaining) {
  const uint32_t n = r.U32();
  std::vector<std::string> list;
  if (!r.ok()) return list;
  if (n > remaining / 4) {
    r.Fail();
    return list;
  }
  list.reserve(std::min<size_t>(n, remaining / sizeof(std::string)));
  for (uint32_t i = 0; i < n && r.ok(); ++i) list.push_back(r.String());
  return list;
}

}  // namespace

namespace {

constexpr EnumName<Op> kOpNames[] = {{Op::kHello, "hello"},
                                     {Op::kProof, "proof"},
                                     {Op::kSet, "set"},
                                     {Op::kAdd, "add"},
                                     {Op::kCompareSet, "compare_set"},
                                     {Op::kWait, "wait"},
                                     {Op::kCheck, "check"},
                                     {Op::kDeleteKey, "delete_key"},
                                     {Op::kNumKeys, "num_keys"},
                                     {Op::kMultiGet, "multi_get"},
                                     {Op::kMultiSet, "multi_set"},
                                     {Op::kAppend, "append"}};

}  // namespace

absl::string_view OpName(Op op) { return NameIn(kOpNames, op, "unknown"); }

void PutU8(std::string* out, uint8_t v) {
  out->push_back(static_cast<char>(v));
}

void PutU32(std::string* out, uint32_t v) {
  char b[4];
  for (int i = 0; i < 4; ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  out->append(b, 4);
}

void PutI64(std::string* out, int64_t v) {
  const uint64_t u = static_cast<uint64_t>(v);
  char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<char>((u >> (8 * i)) & 0xff);
  out->append(b, 8);
}

void PutString(std::string* out, absl::string_view s) {
  PutU32(out, static_cast<uint32_t>(s.size()));
  out->append(s.data(), s.size());
}

uint32_t FrameLength(const char* header) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<uint32_t>(static_cast<unsigned char>(header[i]))
         << (8 * i);
  return v;
}

size_t BeginFrame(std::string* out, uint8_t code) {
  const size_t begin = out->size();
  out->append(kHeaderBytes, '\0');
  PutU8(out, code);
  return begin;
}

void EndFrame(std::string* out, size_t begin) {
  const uint32_t length =
      static_cast<uint32_t>(out->size() - begin - kHeaderBytes);
  for (int i = 0; i < 4; ++i)
    (*out)[begin + i] = static_cast<char>((length >> (8 * i)) & 0xff);
}

void EncodeError(const absl::Status& status, std::string* out) {
  const size_t begin = BeginFrame(out, static_cast<uint8_t>(status.code()));
  PutString(out, status.message());
  EndFrame(out, begin);
}

void EncodeRequest(const Request& request, std::string* out) {
  const size_t begin = BeginFrame(out, static_cast<uint8_t>(request.op));
  auto key = [&]() -> absl::string_view {
    return request.keys.empty() ? absl::string_view() : request.keys[0];
  };
  auto value = [&](size_t i) -> absl::string_view {
    return i < request.values.size() ? absl::string_view(request.values[i])
                                     : absl::string_view();
  };
  switch (request.op) {
    case Op::kHello:
      PutU32(out, request.magic);
      PutString(out, value(0));
      break;
    case Op::kProof:
      PutString(out, value(0));
      break;
    case Op::kSet:
    case Op::kAppend:
      PutString(out, key());
      PutString(out, value(0));
      break;
    case Op::kAdd:
      PutString(out, key());
      PutI64(out, request.number);
      break;
    case Op::kCompareSet:
      PutString(out, key());
      PutString(out, value(0));
      PutString(out, value(1));
      break;
    case Op::kWait:
    case Op::kMultiGet:
      PutList(out, request.keys);
      PutI64(out, request.number);
      PutU8(out, request.try_only ? 1 : 0);
      break;
    case Op::kCheck:
      PutList(out, request.keys);
      break;
    case Op::kDeleteKey:
      PutString(out, key());
      break;
    case Op::kNumKeys:
      break;
    case Op::kMultiSet:
      PutList(out, request.keys);
      PutList(out, request.values);
      break;
  }
  EndFrame(out, begin);
}

void EncodeSet(absl::string_view key, absl::string_view value,
               std::string* out) {
  out->clear();
  out->reserve(kHeaderBytes + 9 + key.size() + value.size());
  const size_t begin = BeginFrame(out, static_cast<uint8_t>(Op::kSet));
  PutString(out, key);
  PutString(out, value);
  EndFrame(out, begin);
}

absl::StatusOr<Request> DecodeRequest(absl::string_view body) {
  Reader r(body);
  Request req;
  const uint8_t op = r.U8();
  if (!r.ok() || op < static_cast<uint8_t>(Op::kHello) ||
      op > static_cast<uint8_t>(Op::kProof)) {
    return absl::InvalidArgumentError(
        absl::StrCat("store: unknown request op ", static_cast<int>(op)));
  }
  req.op = static_cast<Op>(op);
  switch (req.op) {
    case Op::kHello:
      req.magic = r.U32();
      req.values.push_back(r.String());
      break;
    case Op::kProof:
      req.values.push_back(r.String());
      break;
    case Op::kSet:
    case Op::kAppend:
      req.keys.push_back(r.String());
      req.values.push_back(r.String());
      break;
    case Op::kAdd:
      req.keys.push_back(r.String());
      req.number = r.I64();
      break;
    case Op::kCompareSet:
      req.keys.push_back(r.String());
      req.values.push_back(r.String());
      req.values.push_back(r.String());
      break;
    case Op::kWait:
    case Op::kMultiGet:
      req.keys = GetList(r, body.size());
      req.number = r.I64();
      {
        const uint8_t flag = r.U8();
        if (flag > 1) r.Fail();  // one spelling per request
        req.try_only = flag == 1;
      }
      break;
    case Op::kCheck:
      req.keys = GetList(r, body.size());
      break;
    case Op::kDeleteKey:
      req.keys.push_back(r.String());
      break;
    case Op::kNumKeys:
      break;
    case Op::kMultiSet:
      req.keys = GetList(r, body.size());
      req.values = GetList(r, body.size());
      if (r.ok() && req.keys.size() != req.values.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("store: multi_set got ", req.keys.size(), " keys and ",
                         req.values.size(), " values"));
      }
      break;
  }
  if (!r.done()) {
    return absl::InvalidArgumentError(
        absl::StrCat("store: malformed ", OpName(req.op), " request (",
                     r.ok() ? "trailing bytes" : "truncated", ", ", body.size(),
                     " byte(s))"));
  }
  return req;
}

bool Reader::Take(size_t n, absl::string_view* out) {
  if (!ok_ || data_.size() < n) {
    ok_ = false;
    return false;
  }
  *out = data_.substr(0, n);
  data_.remove_prefix(n);
  return true;
}

uint8_t Reader::U8() {
  absl::string_view b;
  return Take(1, &b) ? static_cast<uint8_t>(b[0]) : 0;
}

uint32_t Reader::U32() {
  absl::string_view b;
  return Take(4, &b) ? FrameLength(b.data()) : 0;
}

int64_t Reader::I64() {
  absl::string_view b;
  if (!Take(8, &b)) return 0;
  uint64_t u = 0;
  for (int i = 0; i < 8; ++i)
    u |= static_cast<uint64_t>(static_cast<unsigned char>(b[i])) << (8 * i);
  return static_cast<int64_t>(u);
}

std::string Reader::String() {
  const uint32_t n = U32();
  absl::string_view b;
  if (!Take(n, &b)) return std::string();
  return std::string(b);
}

}  // namespace store_wire
}  // namespace distkit
