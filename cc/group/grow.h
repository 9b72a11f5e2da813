// GrowGroup: a job gets back to its size, without restarting, when a new
// process takes the place of a lost rank (distrun --max-replacements starts
// one with DISTKIT_REPLACEMENT=<n>). The survivors call GrowGroup on the
// group they hold (ShrinkGroup's result, or the poisoned group itself); the
// newcomer, which holds no group, calls JoinGrownWorld with the world's
// store (dist::InitDist does, under DISTKIT_REPLACEMENT, in place of the
// world's rendezvous). Every participant gets the same new group: world
// ranks 0..world_size-1 in the original order, named "world@g<g>".
//
// The agreement, under the world's store at "elastic/<g>/": each participant
// registers its world rank with an id of its process; once all world_size
// ranks are registered, the first compare-and-set of "elastic/<g>/members"
// seals who (by process) the members are; at `timeout` without all of them,
// a participant seals the generation as failed instead, so every
// participant gets the same answer (DEADLINE_EXCEEDED naming the ranks that
// never came). g is the first generation not sealed yet; a participant
// whose registration a seal left out (it came after the seal, or an older
// process of its rank registered) goes on to the next one until `timeout`.
//
// The generation is part of the new group's name and so of every key and
// connection it makes ("pg/world@g<g>/..."): new sockets, new shared-memory
// segments, nothing shared with the old group, whose late messages can never
// reach it. Gloo (shared memory, TCP and hierarchical), NCCL and
// cpu:gloo,cuda:nccl groups, as ShrinkGroup: on NCCL the grown world is a
// new communicator (recovery_backends.h); MPI is DK_UNIMPLEMENTED.

#ifndef DISTKIT_CC_GROUP_GROW_H_
#define DISTKIT_CC_GROUP_GROW_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cc/group/process_group.h"
#include "cc/store/store.h"

namespace distkit {

// Every survivor calls it. `group` is aborted first (nothing may still run
// on it), once the arguments are known to be valid (a refused call, e.g.
// INVALID_ARGUMENT for a world rank outside [0, world_size), leaves it as it
// was); this rank's place is its world rank (group.global_rank()). The new
// group has `world_size` ranks and the options `group` was made with; the
// agreement and the new group's connections take at most `timeout`. Errors
// begin "grow of group '<name>' (world rank <r>)".
//
// Under a store deadline (call_deadline.h), here and in JoinGrownWorld, the
// agreement ends a margin (2 s) before it, so that a generation that fails
// is still sealed as failed: every participant then gets DEADLINE_EXCEEDED
// naming the missing ranks, and no registration of a process that gave up
// is left for the others' GrowPending and grow to count.
absl::StatusOr<std::shared_ptr<ProcessGroup>> GrowGroup(ProcessGroup& group,
                                                        int world_size,
                                                        absl::Duration timeout);

// The newcomer's side: a process without a group joins the grow of the world
// created on `world_store` as world rank `rank` of `world_size`.
absl::StatusOr<std::shared_ptr<ProcessGroup>> JoinGrownWorld(
    std::shared_ptr<Store> world_store, int rank, int world_size,
    GroupOptions options, absl::Duration timeout);

// Local (one look at the world's store): whether a process has registered
// for the next grow of the world `group` belongs to and waits for the
// survivors (a replacement that came after they stopped waiting and
// shrank). `world_size`: the grow's size. Ranks may see it at different
// moments: they must agree before all call GrowGroup.
absl::StatusOr<bool> GrowPending(ProcessGroup& group, int world_size);

// The generation of the world `group` belongs to: g for "world@g<g>" and its
// subgroups, 0 for the first world.
int WorldGeneration(const ProcessGroup& group);

}  // namespace distkit

#endif  // DISTKIT_CC_GROUP_GROW_H_
