#include "tools/distrun/trace_summary.h"

#include <dirent.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace distkit {
namespace {

struct Record {
  int rank = -1;
  uint64_t seq = 0;
  std::string op, state, call;
  int64_t start_us = 0, end_us = 0;
};

// "key=value key=value key=\"quoted value\"" -> map.
std::map<std::string, std::string> Fields(const std::string& line) {
  std::map<std::string, std::string> out;
  size_t i = 0;
  while (i < line.size()) {
    const size_t eq = line.find('=', i);
    if (eq == std::string::npos) break;
    std::string key = line.substr(i, eq - i);
    size_t end;
    std::string value;
    if (eq + 1 < line.size() && line[eq + 1] == '"') {
      end = line.find('"', eq + 2);
      if (end == std::string::npos) end = line.size();
      value = line.substr(eq + 2, end - eq - 2);
      ++end;
    } else {
      end = line.find(' ', eq + 1);
      if (end == std::string::npos) end = line.size();
      value = line.substr(eq + 1, end - eq - 1);
    }
    out[key] = value;
    i = end + 1;
  }
  return out;
}

std::vector<std::string> FilesEndingWith(const std::string& dir,
                                         absl::string_view prefix,
                                         absl::string_view suffix) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (absl::StartsWith(name, prefix) && absl::EndsWith(name, suffix) &&
        name.size() > prefix.size() + suffix.size()) {
      out.push_back(absl::StrCat(dir, "/", name));
    }
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::string SummarizeTraces(const std::string& dir) {
  // group -> rank -> that rank's collectives, oldest first.
  std::map<std::string, std::map<int, std::vector<Record>>> groups;
  for (const std::string& path : FilesEndingWith(dir, "", ".trace")) {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      std::map<std::string, std::string> f = Fields(line);
      if (f["kind"] != "collective") continue;
      Record r;
      if (!absl::SimpleAtoi(f["rank"], &r.rank) ||
          !absl::SimpleAtoi(f["seq"], &r.seq)) {
        continue;
      }
      r.op = f["op"];
      r.state = f["state"];
      r.call = f["call"];
      (void)absl::SimpleAtoi(f["start_us"], &r.start_us);
      (void)absl::SimpleAtoi(f["end_us"], &r.end_us);
      groups[f["group"]][r.rank].push_back(r);
    }
  }
  std::string out;
  for (auto& [group, ranks] : groups) {
    uint64_t k = 0;
    for (auto& [rank, records] : ranks) {
      for (const Record& r : records) k = std::max(k, r.seq);
    }
    std::vector<int> inside, missing;
    std::string lines;
    for (auto& [rank, records] : ranks) {
      const Record* last = records.empty() ? nullptr : &records.back();
      for (const Record& r : records) {
        if (last == nullptr || r.seq > last->seq) last = &r;
      }
      if (last != nullptr && last->seq == k) {
        inside.push_back(rank);
        absl::StrAppend(&lines, "  rank ", rank, ": in ", last->op, " #", k,
                        " (", last->state, ") ", last->call, "\n");
      } else {
        missing.push_back(rank);
        absl::StrAppend(
            &lines, "  rank ", rank, ": never entered #", k,
            last == nullptr
                ? std::string("; no earlier record")
                : absl::StrCat("; last was ", last->op, " #", last->seq, " (",
                               last->state, ") ", last->call),
            "\n");
      }
    }
    absl::StrAppend(
        &out, "distrun: flight records of group '", group,
        "': the latest collective is #", k, "; rank(s) ",
        inside.empty() ? "none" : absl::StrJoin(inside, ", "), " entered it",
        missing.empty()
            ? std::string()
            : absl::StrCat(", rank(s) ", absl::StrJoin(missing, ", "),
                           " never did"),
        " (ranks without a record did not report a failure)\n", lines);
  }
  return out;
}

std::string MergeTimelines(const std::string& prefix) {
  const size_t slash = prefix.rfind('/');
  const std::string dir =
      slash == std::string::npos ? "." : prefix.substr(0, slash);
  const std::string base =
      slash == std::string::npos ? prefix : prefix.substr(slash + 1);
  std::vector<std::string> parts =
      FilesEndingWith(dir, absl::StrCat(base, "."), ".json");
  if (parts.empty()) return "";
  std::string events;
  for (const std::string& path : parts) {
    std::ifstream in(path);
    std::stringstream buf;
    buf << in.rdbuf();
    std::string text = buf.str();
    const size_t open = text.find('[');
    const size_t close = text.rfind(']');
    if (open == std::string::npos || close == std::string::npos ||
        close <= open + 1) {
      continue;
    }
    if (!events.empty()) events += ",";
    events += text.substr(open + 1, close - open - 1);
  }
  const std::string merged = absl::StrCat(prefix, ".json");
  std::ofstream out(merged, std::ios::trunc);
  out << "{\"traceEvents\":[" << events << "]}\n";
  return out ? merged : "";
}

}  // namespace distkit
