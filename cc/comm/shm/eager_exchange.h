// Eager steps: the small rooted operations of a same-host group (broadcast,
// scatter, gather and reduce of at most kSmallSlotBytes) without a barrier,
// where rank 0's environment asks for them (DISTKIT_SHM_EAGER=1; off by
// default, for the cost below: docs/shm_path.md, "Eager steps").
// Their senders (a broadcast's or scatter's root, a gather's or reduce's
// non-roots) write the signature and payload into their eager entry of the
// step, publish the step and return; their receivers wait only for the
// entries they read. A sender runs at most kEagerDepth - 1 steps ahead of
// the slowest rank (it writes an entry again only once every rank has
// published the step after it, i.e. read it), so a loop of small broadcasts
// costs the root a copy into its own cache line, not a round trip per call:
// what OpenMPI's eager protocol gives its roots. A synchronized step would
// not do: with two turns a root that skipped its wait must wait before its
// next write instead, and the loop keeps its round trip.
//
// What the ranks cannot see at once they see later, through a chain: each
// rank hashes the signature of every eager operation it takes into a
// running value (ChainWith), published with each of its steps. A receiver
// compares its senders' signatures and chains with its own at once; every
// exchange of a later synchronized operation compares every rank's chain.
// So calls that differ are found either in the operation itself (by a
// receiver) or in the next operation that hears from the rank whose calls
// differed, and they fail the group (ABORTED) on every rank, since a sender
// may already have returned: a sender learns only at a later call. Calls
// that differ in synchronized operations stay refusals as before (the
// contract's INVALID_ARGUMENT, the group usable), and so do all calls where
// eager steps are off (every chain stays 0).

#ifndef DISTKIT_CC_COMM_SHM_EAGER_EXCHANGE_H_
#define DISTKIT_CC_COMM_SHM_EAGER_EXCHANGE_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "cc/comm/backend.h"
#include "cc/comm/op_context.h"
#include "cc/comm/op_signature.h"
#include "cc/comm/shm/shm_steps.h"

namespace distkit {

// Whether an operation `op` whose signature exchange carries a payload of
// `bytes` (InlinePayload::bytes: a scatter's whole input, a gather's part)
// takes an eager step. The same answer on every rank whose calls agree.
bool TakesEagerStep(OpCode op, size_t bytes);

// `chain` with the eager operation `sig` hashed in.
uint64_t ChainWith(uint64_t chain, const OpSignature& sig);

// This rank's eager step of operation `mine`: waits until its entry of the
// step may be written, writes `mine`, *chain (after hashing `mine` into it)
// and, for a sender, payload.data, publishes the step, and for a receiver
// waits for its senders' entries and compares their signatures and chains
// with its own. Sets *step to the step, whose entries hold the payloads.
// Errors: a wait's (deadline, abort, a failed group, a rank gone), or
// ABORTED where calls differ (the group is then marked failed, so that no
// peer waits for this rank).
absl::Status EagerExchange(ShmSteps& steps, const OpContext& ctx,
                           const OpSignature& mine, InlinePayload payload,
                           uint64_t* chain, uint64_t* step);

// The error of a synchronized exchange at step `step` (after ShmSteps::Step)
// whose ranks' chains differ (`chain`: this rank's) or of which some rank
// took an eager step: ABORTED naming what each rank called where that can
// be told, with the group marked failed; OK when neither is so. Fills `all`
// with each rank's signature of the step (from its eager entry where it
// took one).
absl::Status CheckChains(ShmSteps& steps, const OpContext& ctx, uint64_t chain,
                         uint64_t step, absl::Span<OpSignature> all);

}  // namespace distkit

#endif  // DISTKIT_CC_COMM_SHM_EAGER_EXCHANGE_H_
