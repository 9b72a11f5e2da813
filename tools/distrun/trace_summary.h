// After a failed job, distrun reads the flight records its ranks wrote
// (cc/group/flight_recorder.h; one file per group and rank in
// DISTKIT_TRACE_DIR) and prints one cross-rank summary per group: the latest
// collective any rank entered (#K), the ranks that never entered it and what
// each was last doing, and the ranks stuck inside it. It also merges the
// ranks' Chrome-trace timelines (DISTKIT_TIMELINE=<prefix>) into
// <prefix>.json.

#ifndef DISTKIT_TOOLS_DISTRUN_TRACE_SUMMARY_H_
#define DISTKIT_TOOLS_DISTRUN_TRACE_SUMMARY_H_

#include <string>

namespace distkit {

// The summary of every *.trace file in `dir`; empty when there is none.
std::string SummarizeTraces(const std::string& dir);

// Merges <prefix>.*.json (the ranks' timelines) into <prefix>.json; returns
// that path, or empty when there was nothing to merge.
std::string MergeTimelines(const std::string& prefix);

}  // namespace distkit

#endif  // DISTKIT_TOOLS_DISTRUN_TRACE_SUMMARY_H_
