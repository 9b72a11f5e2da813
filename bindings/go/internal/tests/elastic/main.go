// The elastic check (a test program, kept under internal/ so it is no
// command of the module) runs capi/test/elastic_c_multirank_test.c's loop in
// Go: a small model (w and its momentum m, float64) takes 16 steps, each
// step's gradient summed over a global batch of 12 samples shared among the
// ranks of the current group (rank r of n takes samples [r*12/n,
// (r+1)*12/n)), all_reduced (sum) and divided by 12, so every world size
// trains on the same batches. w, m and the step are registered in a
// distkit.Snapshot, committed before the first step and after every 4th. In
// step dieAt (7 + the world size) rank size/2 SIGKILLs itself after the
// first half of the momentum update, before the all_reduce: the survivors'
// step fails with their momentum half-updated. Under
// DISTKIT_MAX_REPLACEMENTS (distrun --max-replacements 1) they Group.Grow
// while distrun's new process joins through distkit.Init; else, where
// DISTKIT_MIN_RANKS allows (distrun --min-ranks 1), they Group.Shrink. Every
// member of the new group, the replacement included (its state starts as
// NaN), calls Snapshot.Sync and all redo the steps since the commit. The
// final weights are compared with an uninterrupted run computed here without
// communication (relative 1e-12). The argument ("grow" or "shrink") says
// which recovery the launcher's variables must lead to. Check failures are
// summed over the final group, so a wrong rank fails every rank (and
// --min-ranks cannot let the job pass).
package main

import (
	"fmt"
	"math"

	dk "distkit.dev/distkit"
	em "distkit.dev/distkit/internal/tests/elasticmodel"
)

const dim = 4

func main() {
	var job em.Job
	group := job.Start()
	rank := job.Rank

	w, m, step := em.InitialW(dim, 0.25), make([]float64, dim), []int64{0}
	if job.Newcomer {
		// Whatever a fresh process holds: only the sync may give it its state.
		for j := range w {
			w[j], m[j] = math.NaN(), math.NaN()
		}
		step[0] = -1
	}
	snapshot, err := dk.NewSnapshot()
	if err != nil {
		job.Die("snapshot", err)
	}
	defer snapshot.Close()
	if err := dk.RegisterBuffer(snapshot, "w", w); err != nil {
		job.Die("register", err)
	}
	if err := dk.RegisterBuffer(snapshot, "momentum", m); err != nil {
		job.Die("register", err)
	}
	if err := dk.RegisterBuffer(snapshot, "step", step); err != nil {
		job.Die("register", err)
	}
	recoveries, stepsRun := 0, int64(0)
	if job.Newcomer {
		// Init joined the survivors' grow: its world is the grown group, on
		// which the survivors sync next.
		commit, err := snapshot.Sync(group)
		if err != nil {
			job.Die("sync", err)
		}
		fmt.Printf("rank %d: replacement joined '%s', loaded commit %d (step %d)\n", rank, group.Name(), commit, step[0])
		job.CheckJoined(commit, step[0])
	} else if err := snapshot.Commit(); err != nil {
		job.Die("the first commit", err)
	}
	for step[0] < em.Steps {
		n, r := group.Size(), group.Rank()
		g := em.Gradient(step[0], r*em.GlobalBatch/n, (r+1)*em.GlobalBatch/n, w)
		for j := range m {
			m[j] *= em.Beta
		}
		if !job.Newcomer && recoveries == 0 && rank == job.Victim && step[0] == job.DieAt {
			job.SigkillSelf(step[0])
		}
		if err := dk.AllReduce(group, g, dk.Sum); err != nil {
			fmt.Printf("rank %d: step %d failed (%v); recovering\n", rank, step[0], err)
			job.Check(step[0] == job.DieAt, "the step the victim died in fails")
			c := dk.CodeOf(err)
			job.Check(c == dk.Unavailable || c == dk.DeadlineExceeded, "a lost peer or a timeout")
			next, grown := job.Regroup(group)
			job.CheckRegroup(next, grown)
			group.Close()
			group = next
			recoveries++
			commit, err := snapshot.Sync(group)
			if err != nil {
				job.Die("sync", err)
			}
			job.CheckRecovery(group, grown, "loaded", commit, step[0])
			continue
		}
		for j := range w {
			m[j] += g[j] / em.GlobalBatch
			w[j] -= em.LR * m[j]
		}
		step[0]++
		stepsRun++
		if step[0]%em.CommitEvery == 0 {
			if err := snapshot.Commit(); err != nil {
				job.Die("commit", err)
			}
		}
	}
	job.Check(snapshot.CommitNumber() == 1+em.Steps/em.CommitEvery, "every commit counted")
	job.Check(snapshot.Bytes() == 2*dim*8+8, "a full copy held")
	job.CheckTrained(w, em.InitialW(dim, 0.25), stepsRun, recoveries)
	// Every rank ends with the job's verdict.
	failures := job.Failures(group)
	snapshot.Close()
	group.Close()
	dk.Shutdown()
	job.End(failures, stepsRun)
}
