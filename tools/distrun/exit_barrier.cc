#include "tools/distrun/exit_barrier.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "cc/store/tcp_store.h"

namespace distkit {
namespace {

constexpr absl::Duration kCancelCheckPeriod = absl::Milliseconds(200);

// The first of `keys`' reports (node n + 1 for keys[n]) that is not a
// success; a report that is not a number is not one. Missing ones are
// skipped ("" from a get of keys that exist).
NodeReports FirstFailure(const std::vector<std::string>& codes) {
  for (size_t i = 0; i < codes.size(); ++i) {
    if (codes[i].empty()) continue;
    int code = 0;
    if (!absl::SimpleAtoi(codes[i], &code)) code = 1;
    if (code != 0) return {static_cast<int>(i) + 1, code};
  }
  return {};
}

absl::StatusOr<std::unique_ptr<TcpStore>> ConnectWithin(
    const ExitBarrierOptions& options, absl::Duration timeout) {
  return TcpStore::Connect(
      {options.store_address, options.token, timeout, timeout});
}

}  // namespace

std::string ExitBarrierKey(int node_rank) {
  return absl::StrCat("distrun/exit/node", node_rank);
}

absl::Status ReportNodeDone(const ExitBarrierOptions& options,
                            const std::function<int()>& exit_code) {
  absl::StatusOr<std::unique_ptr<TcpStore>> store =
      ConnectWithin(options, options.report_timeout);
  if (!store.ok()) return store.status();
  // The handshake (done by the first call) is the wait; the code is taken
  // after it, so a signal during it is reported, not a stale 0.
  const std::string key = ExitBarrierKey(options.node_rank);
  if (absl::StatusOr<bool> there = (*store)->Check({key}); !there.ok()) {
    return there.status();
  }
  return (*store)->Set(key, absl::StrCat(exit_code()));
}

absl::StatusOr<NodeReports> WaitForNodes(const ExitBarrierOptions& options) {
  absl::StatusOr<std::unique_ptr<TcpStore>> store =
      ConnectWithin(options, options.timeout);
  if (!store.ok()) return store.status();
  std::vector<std::string> keys;
  for (int n = 1; n < options.nnodes; ++n) keys.push_back(ExitBarrierKey(n));
  // In slices, so that `cancelled` is heard within one.
  const absl::Time end = absl::Now() + options.timeout;
  absl::Status waited;
  while (true) {
    const absl::Duration left = end - absl::Now();
    waited = (*store)->WaitWithTimeout(
        keys, options.cancelled ? std::min(left, kCancelCheckPeriod) : left);
    if (!waited.ok() && !absl::IsDeadlineExceeded(waited)) return waited;
    if (waited.ok()) break;
    if (options.cancelled && options.cancelled()) {
      return absl::CancelledError("the exit barrier was interrupted");
    }
    if (absl::Now() >= end) break;
  }
  if (waited.ok()) {
    absl::StatusOr<std::vector<std::string>> codes =
        (*store)->MultiGetWithTimeout(keys, absl::Seconds(5));
    if (!codes.ok()) return codes.status();
    return FirstFailure(*codes);
  }
  std::vector<int> missing;
  std::vector<std::string> present(keys.size());
  for (int n = 1; n < options.nnodes; ++n) {
    absl::StatusOr<bool> there = (*store)->Check({ExitBarrierKey(n)});
    if (!there.ok() || !*there) {
      missing.push_back(n);
      continue;
    }
    absl::StatusOr<std::vector<std::string>> code =
        (*store)->MultiGetWithTimeout({ExitBarrierKey(n)}, absl::Seconds(5));
    if (code.ok() && code->size() == 1) present[n - 1] = (*code)[0];
  }
  // A node that reported a failure is the job's result even where another
  // never reported.
  if (NodeReports failed = FirstFailure(present); failed.exit_code != 0) {
    return failed;
  }
  return absl::DeadlineExceededError(
      absl::StrCat("node(s) ", absl::StrJoin(missing, ", "),
                   " did not report their ranks "
                   "done within ",
                   absl::FormatDuration(options.timeout)));
}

}  // namespace distkit
