// The names of same-host groups' segments in /dev/shm, and the removal of
// those whose creator died before it could unlink them. A segment's name is
// unlinked as soon as every rank has mapped it (or the group gave up on
// it); only a creator killed between shm_open and that unlink leaves one
// behind. The name says who created it, "/distkit-<pid>-<pid namespace>-
// <random>", so that a survivor of the job, or the next job on the host,
// can tell such an orphan from a live group's segment and remove it.

#ifndef DISTKIT_CC_COMM_SHM_SEGMENT_NAMES_H_
#define DISTKIT_CC_COMM_SHM_SEGMENT_NAMES_H_

#include <string>

namespace distkit {

// A fresh name for a segment this process creates.
std::string NewSegmentName();

// Unlinks every segment whose name says it was created in this pid
// namespace by a process that no longer runs (gone, or a zombie). Segments
// of other namespaces, and names in another form, are left alone: their
// creators cannot be checked from here. Returns how many it removed.
int RemoveOrphanSegments();

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_SHM_SEGMENT_NAMES_H_
