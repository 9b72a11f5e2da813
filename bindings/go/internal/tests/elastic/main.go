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
	"os"
	"syscall"
	"time"

	dk "distkit.dev/distkit"
	em "distkit.dev/distkit/internal/tests/elasticmodel"
)

const (
	dim         = 4
	globalBatch = 12
	steps       = 16
	commitEvery = 4
	lr          = 0.1
	beta        = 0.9
	timeout     = 20 * time.Second
	settle      = 2 * time.Second
)

var (
	rank     = -1
	failures = 0
)

func check(ok bool, what string) {
	if !ok {
		fmt.Fprintf(os.Stderr, "rank %d: CHECK FAILED: %s\n", rank, what)
		failures++
	}
}

func die(what string, err error) {
	fmt.Fprintf(os.Stderr, "rank %d: %s: %v\n", rank, what, err)
	os.Exit(1)
}

func initialW() []float64 {
	w := make([]float64, dim)
	for j := range w {
		w[j] = 0.5 - 0.25*float64(j)
	}
	return w
}

func main() {
	wantGrow := len(os.Args) > 1 && os.Args[1] == "grow"
	newcomer := em.LauncherNumber("DISTKIT_REPLACEMENT") > 0
	group, err := dk.Init("pytorch", dk.InitOptions{Timeout: timeout})
	if err != nil {
		die("init", err)
	}
	rank = group.Rank()
	size := group.Size()
	if size < 2 {
		die("world size", fmt.Errorf("needs 2 ranks or more, has %d", size))
	}
	check(wantGrow == (em.LauncherNumber("DISTKIT_MAX_REPLACEMENTS") > 0), "replacements in the grow variant only")
	check(wantGrow || em.LauncherNumber("DISTKIT_MIN_RANKS") > 0, "the shrink variant runs under --min-ranks")
	victim := size / 2
	dieAt := int64(7 + size)
	wantCommit := 1 + dieAt/commitEvery
	commitStep := dieAt / commitEvery * commitEvery

	w, m, step := initialW(), make([]float64, dim), []int64{0}
	if newcomer {
		// Whatever a fresh process holds: only the sync may give it its state.
		for j := range w {
			w[j], m[j] = math.NaN(), math.NaN()
		}
		step[0] = -1
	}
	snapshot, err := dk.NewSnapshot()
	if err != nil {
		die("snapshot", err)
	}
	defer snapshot.Close()
	if err := dk.RegisterBuffer(snapshot, "w", w); err != nil {
		die("register", err)
	}
	if err := dk.RegisterBuffer(snapshot, "momentum", m); err != nil {
		die("register", err)
	}
	if err := dk.RegisterBuffer(snapshot, "step", step); err != nil {
		die("register", err)
	}
	recoveries, stepsRun := 0, int64(0)
	if newcomer {
		// Init joined the survivors' grow: its world is the grown group, on
		// which the survivors sync next.
		commit, err := snapshot.Sync(group)
		if err != nil {
			die("sync", err)
		}
		fmt.Printf("rank %d: replacement joined '%s', loaded commit %d (step %d)\n", rank, group.Name(), commit, step[0])
		check(commit == wantCommit, "the replacement loads the newest commit")
		check(step[0] == commitStep, "the replacement's step is the commit's")
	} else if err := snapshot.Commit(); err != nil {
		die("the first commit", err)
	}
	for step[0] < steps {
		n, r := group.Size(), group.Rank()
		g := em.Gradient(step[0], r*globalBatch/n, (r+1)*globalBatch/n, w)
		for j := range m {
			m[j] *= beta
		}
		if !newcomer && recoveries == 0 && rank == victim && step[0] == dieAt {
			fmt.Printf("rank %d: SIGKILL in step %d\n", rank, step[0])
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal ends the process
		}
		if err := dk.AllReduce(group, g, dk.Sum); err != nil {
			fmt.Printf("rank %d: step %d failed (%v); recovering\n", rank, step[0], err)
			check(step[0] == dieAt, "the step the victim died in fails")
			c := dk.CodeOf(err)
			check(c == dk.Unavailable || c == dk.DeadlineExceeded, "a lost peer or a timeout")
			next, grown := em.Regroup(group, timeout, settle, die)
			group.Close()
			group = next
			recoveries++
			check(grown == wantGrow, "grown under --max-replacements, else shrunk")
			wantSize := size - 1
			if grown {
				wantSize = size
			}
			check(group.Size() == wantSize, "the new group's size")
			commit, err := snapshot.Sync(group)
			if err != nil {
				die("sync", err)
			}
			how := "shrank"
			if grown {
				how = "grew"
			}
			fmt.Printf("rank %d: %s to %d ranks, loaded commit %d (step %d)\n", rank, how, group.Size(), commit, step[0])
			check(commit == wantCommit, "the survivors load the newest commit")
			check(step[0] == commitStep, "the step is the commit's: the steps since are redone")
			continue
		}
		for j := range w {
			m[j] += g[j] / globalBatch
			w[j] -= lr * m[j]
		}
		step[0]++
		stepsRun++
		if step[0]%commitEvery == 0 {
			if err := snapshot.Commit(); err != nil {
				die("commit", err)
			}
		}
	}
	check(snapshot.CommitNumber() == 1+steps/commitEvery, "every commit counted")
	check(snapshot.Bytes() == 2*dim*8+8, "a full copy held")
	if newcomer {
		check(stepsRun == steps-commitStep, "the replacement trains from the commit")
	} else {
		check(recoveries == 1, "one recovery")
		check(stepsRun == steps+dieAt-commitStep, "the steps since the commit are trained twice")
	}
	want := em.Reference(initialW(), steps, globalBatch, lr, beta)
	for j := range w {
		if !(math.Abs(w[j]-want[j]) <= 1e-12*math.Abs(want[j])+1e-14) {
			fmt.Fprintf(os.Stderr, "rank %d: w[%d] = %.17g, the uninterrupted run's %.17g\n", rank, j, w[j], want[j])
			check(false, "final weights equal the uninterrupted run's")
		}
	}
	// Every rank ends with the job's verdict.
	bad := []float64{float64(failures)}
	if err := dk.AllReduce(group, bad, dk.Sum); err != nil {
		die("the final all_reduce", err)
	}
	snapshot.Close()
	group.Close()
	dk.Shutdown()
	if bad[0] > 0 {
		fmt.Fprintf(os.Stderr, "rank %d: %g check(s) failed in the job\n", rank, bad[0])
		os.Exit(1)
	}
	how := "shrank"
	if newcomer {
		how = "joined as a replacement"
	} else if wantGrow {
		how = "grew back"
	}
	fmt.Printf("rank %d: %s; w equals the uninterrupted run's after %d steps\n", rank, how, stepsRun)
}
