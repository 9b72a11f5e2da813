#include "cc/group/agreement_roll_call.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cc/core/status.h"

namespace distkit {

absl::StatusOr<RollCall> TakeRollCall(Store& store, absl::string_view prefix,
                                      int rank, int size,
                                      absl::string_view value,
                                      absl::Time stop_polling,
                                      absl::Duration poll_interval) {
  DK_RETURN_IF_ERROR(store.Set(absl::StrCat(prefix, rank), value));
  RollCall call;
  while (true) {
    call.present.clear();
    call.absent.clear();
    for (int r = 0; r < size; ++r) {
      DK_ASSIGN_OR_RETURN(bool here, store.Check({absl::StrCat(prefix, r)}));
      (here ? call.present : call.absent).push_back(r);
    }
    if (call.absent.empty() || absl::Now() >= stop_polling) return call;
    absl::SleepFor(poll_interval);
  }
}

}  // namespace distkit
