// A line every rank of a job reaches through the job's store alone: for
// tests whose group or backend is what they test, so cannot be the barrier
// (they start together after it, or stay until every peer is done).

#ifndef DISTKIT_TESTING_CC_STORE_MARKS_H_
#define DISTKIT_TESTING_CC_STORE_MARKS_H_

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "cc/store/store.h"
#include "testing/cc/rank_check.h"

namespace distkit {
namespace testing {

// Sets this rank's mark "<name>/<rank>" and waits up to `timeout` for all
// `size` ranks' marks; a failure stops the rank ("mark <name>", "all <name>").
inline void MarkAndAwaitAll(Store& store, absl::string_view name, int rank,
                            int size, absl::Duration timeout) {
  std::vector<std::string> marks;
  for (int r = 0; r < size; ++r) marks.push_back(absl::StrCat(name, "/", r));
  RequireOk(store.Set(marks[rank], "1"), absl::StrCat("mark ", name));
  RequireOk(store.WaitWithTimeout(marks, timeout), absl::StrCat("all ", name));
}

}  // namespace testing
}  // namespace distkit

#endif  // DISTKIT_TESTING_CC_STORE_MARKS_H_
