#include "cc/launch/hostlist.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace distkit {
namespace {

constexpr size_t kMaxHosts = 1000000;

absl::Status Malformed(absl::string_view text, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("malformed hostlist '", text, "': ", why));
}

// Expands one bracket body "01-03,07" into its strings, at most `max_numbers`
// of them: the running total is checked before each part is expanded (20
// parts of 0-999999 once took 1 GB before the total was checked).
absl::StatusOr<std::vector<std::string>> ExpandRanges(absl::string_view whole,
                                                      absl::string_view body,
                                                      size_t max_numbers) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(body, ',')) {
    std::pair<absl::string_view, absl::string_view> lo_hi =
        absl::StrSplit(part, absl::MaxSplits('-', 1));
    absl::string_view lo = lo_hi.first;
    const bool is_range = part.find('-') != absl::string_view::npos;
    absl::string_view hi = is_range ? lo_hi.second : lo;
    uint64_t a = 0, b = 0;
    for (absl::string_view n : {lo, hi}) {
      if (n.empty()) return Malformed(whole, "empty range bound");
      for (char c : n) {
        if (!absl::ascii_isdigit(c)) {
          return Malformed(whole, absl::StrCat("'", n, "' is not a number"));
        }
      }
    }
    if (!absl::SimpleAtoi(lo, &a) || !absl::SimpleAtoi(hi, &b)) {
      return Malformed(whole, "range bound out of range");
    }
    if (b < a) return Malformed(whole, absl::StrCat("reversed range ", part));
    if (b - a >= max_numbers || out.size() > max_numbers - (b - a + 1)) {
      return Malformed(whole, "too many hosts");
    }
    const size_t width = lo.size();
    // Counted from a, not `i <= b`, which never ends when b is UINT64_MAX.
    for (uint64_t k = 0; k <= b - a; ++k) {
      std::string n = absl::StrCat(a + k);
      if (n.size() < width) n.insert(0, width - n.size(), '0');
      out.push_back(std::move(n));
    }
  }
  return out;
}

// Expands one host expression (no top-level commas), e.g. "r[1-2]-n[3,5]".
absl::Status ExpandOne(absl::string_view whole, absl::string_view expr,
                       std::vector<std::string>* hosts) {
  std::vector<std::string> partial = {""};
  size_t i = 0;
  while (i < expr.size()) {
    const size_t open = expr.find('[', i);
    const size_t close_before = expr.find(']', i);
    if (close_before != absl::string_view::npos &&
        (open == absl::string_view::npos || close_before < open)) {
      return Malformed(whole, "']' without '['");
    }
    absl::string_view literal =
        expr.substr(i, open == absl::string_view::npos ? absl::string_view::npos
                                                       : open - i);
    for (std::string& p : partial) absl::StrAppend(&p, literal);
    if (open == absl::string_view::npos) break;
    const size_t close = expr.find(']', open);
    if (close == absl::string_view::npos)
      return Malformed(whole, "'[' without ']'");
    // What the hosts expanded so far leave of kMaxHosts, shared by the
    // names this bracket multiplies.
    const size_t room = kMaxHosts - std::min(kMaxHosts, hosts->size());
    absl::StatusOr<std::vector<std::string>> numbers = ExpandRanges(
        whole, expr.substr(open + 1, close - open - 1), room / partial.size());
    if (!numbers.ok()) return numbers.status();
    std::vector<std::string> next;
    next.reserve(partial.size() * numbers->size());
    for (const std::string& p : partial) {
      for (const std::string& n : *numbers) next.push_back(absl::StrCat(p, n));
    }
    partial = std::move(next);
    i = close + 1;
  }
  for (std::string& p : partial) {
    if (p.empty()) return Malformed(whole, "empty host name");
    hosts->push_back(std::move(p));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ExpandHostlist(
    absl::string_view text) {
  std::vector<std::string> hosts;
  if (absl::StripAsciiWhitespace(text).empty()) {
    return Malformed(text, "no hosts");
  }
  // Split on commas outside brackets.
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    const char c = i < text.size() ? text[i] : ',';
    if (c == '[') {
      if (++depth > 1) return Malformed(text, "nested '['");
    } else if (c == ']') {
      if (--depth < 0) return Malformed(text, "']' without '['");
    } else if (c == ',' && depth == 0) {
      absl::string_view expr =
          absl::StripAsciiWhitespace(text.substr(start, i - start));
      if (expr.empty()) return Malformed(text, "empty host name");
      absl::Status s = ExpandOne(text, expr, &hosts);
      if (!s.ok()) return s;
      if (hosts.size() > kMaxHosts) return Malformed(text, "too many hosts");
      start = i + 1;
    }
  }
  if (depth != 0) return Malformed(text, "'[' without ']'");
  return hosts;
}

}  // namespace distkit
