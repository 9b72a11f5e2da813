#include "cc/group/agreement_roll_call.h"

#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "cc/core/status.h"

namespace distkit {

absl::StatusOr<RollCall> TakeRollCall(Store& store, absl::string_view prefix,
                                      int rank, int size,
                                      absl::string_view value,
                                      absl::Time stop_polling,
                                      absl::Duration poll_interval) {
  DK_RETURN_IF_ERROR(store.Set(absl::StrCat(prefix, rank), value));
  std::optional<RollCall> last;  // the last complete poll
  while (true) {
    RollCall call;
    for (int r = 0; r < size; ++r) {
      absl::StatusOr<bool> here = store.Check({absl::StrCat(prefix, r)});
      if (!here.ok()) {
        // A store that answers too slowly late in the window (its host
        // starved of CPU): the last complete poll still says who was there.
        if (last.has_value() &&
            here.status().code() == absl::StatusCode::kDeadlineExceeded) {
          return *std::move(last);
        }
        return here.status();
      }
      (*here ? call.present : call.absent).push_back(r);
    }
    if (call.absent.empty() || absl::Now() >= stop_polling) return call;
    last = call;
    absl::SleepFor(poll_interval);
  }
}

std::string LateRanksMessage(const RollCall& call, bool exchanged,
                             absl::string_view hosts) {
  const std::string absent = absl::StrJoin(call.absent, ", ");
  const std::string present = absl::StrJoin(call.present, ", ");
  if (exchanged) {
    return absl::StrCat(
        "; every rank reached this operation (their signatures for it were "
        "exchanged); rank(s) ",
        absent, " did not answer the roll call (", hosts,
        hosts.empty() ? "" : "; ",
        "they finished it, or are stuck inside it: a peer may be slow; "
        "rank(s) ",
        present, " answered)");
  }
  return absl::StrCat("; rank(s) ", absent, " never joined it (", hosts,
                      hosts.empty() ? "" : "; ", "rank(s) ", present, " did)");
}

}  // namespace distkit
