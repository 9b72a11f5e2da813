#include "tools/distrun/output_forwarder.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace distkit {

OutputForwarder::OutputForwarder(
    std::function<void(int fd, absl::string_view text)> write, bool one_place)
    : write_(std::move(write)), one_place_(one_place) {}

void OutputForwarder::Add(RankStream& s, absl::string_view data,
                          absl::Time now) {
  s.partial.append(data.data(), data.size());
  s.last_data = now;
  const size_t last_newline = s.partial.rfind('\n');
  if (last_newline != std::string::npos) {
    Emit(s, absl::string_view(s.partial).substr(0, last_newline + 1),
         /*ends_line=*/true);
    s.partial.erase(0, last_newline + 1);
  }
  if (s.partial.size() > kMaxPartial) {
    Emit(s, s.partial, /*ends_line=*/false);
    s.partial.clear();
  }
}

void OutputForwarder::FlushIfQuiet(RankStream& s, absl::Time now) {
  if (s.partial.empty() || now - s.last_data < kQuietPeriod) return;
  Emit(s, s.partial, /*ends_line=*/false);
  s.partial.clear();
}

void OutputForwarder::End(RankStream& s) {
  const int place = Place(s.forward_to);
  if (!one_place_) {
    // Apart, a newline here would be a byte the rank never wrote; the line
    // is ended only if other output comes to it (a replacement of this
    // rank, which reuses `s`, included).
    if (!s.partial.empty()) {
      Emit(s, s.partial, /*ends_line=*/false);
      s.partial.clear();
    }
    auto it = open_.find(place);
    if (it != open_.end() && it->second.stream == &s) {
      it->second.stream = nullptr;
    }
    return;
  }
  if (!s.partial.empty()) {
    Emit(s, absl::StrCat(s.partial, "\n"), /*ends_line=*/true);
    s.partial.clear();
  } else {
    auto it = open_.find(place);
    if (it != open_.end() && it->second.stream == &s) {
      EndOpenLine(place, nullptr);
    }
  }
}

void OutputForwarder::Message(int fd, absl::string_view text) {
  EndOpenLine(Place(fd), nullptr);
  write_(fd, text);
}

void OutputForwarder::Emit(RankStream& s, absl::string_view text,
                           bool ends_line) {
  const int place = Place(s.forward_to);
  EndOpenLine(place, &s);
  const std::string prefix = absl::StrCat("[rank", s.rank, "]: ");
  // One write for all the lines: each is prefixed, except the first when it
  // continues this stream's open line.
  std::string out;
  bool line_start = open_.count(place) == 0;
  for (size_t start = 0; start < text.size();) {
    const size_t newline = text.find('\n', start);
    const size_t end =
        newline == absl::string_view::npos ? text.size() : newline + 1;
    if (line_start) out += prefix;
    out.append(text.data() + start, end - start);
    line_start = true;
    start = end;
  }
  write_(s.forward_to, out);
  if (ends_line) {
    open_.erase(place);
  } else {
    open_[place] = OpenLine{&s, s.forward_to};
  }
}

void OutputForwarder::EndOpenLine(int place, const RankStream* except) {
  auto it = open_.find(place);
  if (it == open_.end() || (except != nullptr && it->second.stream == except)) {
    return;
  }
  write_(it->second.fd, "\n");
  open_.erase(it);
}

}  // namespace distkit
