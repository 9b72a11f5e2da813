// Package elasticmodel is what the Go elastic-loop checks share
// (internal/tests/elastic, whose state is a distkit.Snapshot, and
// internal/tests/shardedelastic, whose state is a Shard's shard in a
// distkit.ShardedSnapshot), as testing/c/elastic_model.h is for the C ones:
// the launcher's numbers, the model's loss, the checks' bookkeeping (Job) and
// the recovery after a lost peer as distkit.elastic decides it.
package elasticmodel

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"syscall"
	"time"

	dk "distkit.dev/distkit"
)

// The loop's numbers, as testing/c/elastic_model.h has them: a global batch
// of GlobalBatch samples a step, Steps steps of SGD with momentum, a commit
// before the first step and after every CommitEvery-th.
const (
	GlobalBatch = 12
	Steps       = 16
	CommitEvery = 4
	LR          = 0.1
	Beta        = 0.9
	// Timeout bounds Init and the wait for a replacement; Settle is how
	// long a shrink waits for further losses.
	Timeout = 20 * time.Second
	Settle  = 2 * time.Second
)

// LauncherNumber is a launcher's variable as a number (0 when unset).
func LauncherNumber(name string) int {
	n, _ := strconv.Atoi(os.Getenv(name))
	return n
}

// InitialW is the weights a check starts from: dim values falling from 0.5
// by slope.
func InitialW(dim int, slope float64) []float64 {
	w := make([]float64, dim)
	for j := range w {
		w[j] = 0.5 - slope*float64(j)
	}
	return w
}

// Sample is element j of sample i of step t's batch; Weight its weight in
// the loss.
func Sample(t int64, i, j int) float64 {
	return math.Sin(0.37*float64(t) + 1.3*float64(i) + 0.7*float64(j))
}

func Weight(t int64, i int) float64 { return 1 + 0.5*math.Cos(float64(t)+float64(i)) }

// Gradient is the summed gradient of samples [lo, hi) of step t at w: a
// weighted squared error plus a quartic term, so each update depends on w
// nonlinearly.
func Gradient(t int64, lo, hi int, w []float64) []float64 {
	g := make([]float64, len(w))
	for j := range g {
		for i := lo; i < hi; i++ {
			g[j] += Weight(t, i)*(w[j]-Sample(t, i, j)) + 0.01*w[j]*w[j]*w[j]
		}
	}
	return g
}

// Reference is the uninterrupted run from w0 in one process: Steps steps of
// SGD with momentum on the mean gradient of each step's global batch.
func Reference(w0 []float64) []float64 {
	w := append([]float64(nil), w0...)
	m := make([]float64, len(w))
	for t := int64(0); t < Steps; t++ {
		g := Gradient(t, 0, GlobalBatch, w)
		for j := range w {
			m[j] = Beta*m[j] + g[j]/GlobalBatch
			w[j] -= LR * m[j]
		}
	}
	return w
}

// Regroup is the survivors' new group after g failed: grown back where the
// launcher replaces a lost rank, else (or when no replacement came in time
// and the job may go on smaller) shrunk; and whether it grew.
func (j *Job) Regroup(g *dk.Group) (*dk.Group, bool) {
	if LauncherNumber("DISTKIT_MAX_REPLACEMENTS") > 0 {
		grown, err := g.Grow(0, Timeout)
		if err == nil {
			return grown, true
		}
		if dk.CodeOf(err) != dk.DeadlineExceeded || LauncherNumber("DISTKIT_MIN_RANKS") <= 0 {
			j.Die("grow", err)
		}
	}
	shrunk, err := g.Shrink(Settle)
	if err != nil {
		j.Die("shrink", err)
	}
	return shrunk, false
}

// Job is one rank's elastic check: the variant the program's argument names
// ("grow" or "shrink"), the loss it plans (rank Victim SIGKILLs itself in
// step DieAt) and what the recovery must load; it counts the failed checks.
type Job struct {
	Rank, Size int // in the world Init joined
	Newcomer   bool
	WantGrow   bool
	Victim     int
	DieAt      int64
	WantCommit int64 // the newest commit when the victim dies
	CommitStep int64 // its step: the steps since are redone
	failures   int
}

// Start joins the job (distkit.Init) and checks that the launcher's
// variables lead to the recovery the variant expects.
func (j *Job) Start() *dk.Group {
	j.Rank = -1
	j.WantGrow = len(os.Args) > 1 && os.Args[1] == "grow"
	j.Newcomer = LauncherNumber("DISTKIT_REPLACEMENT") > 0
	group, err := dk.Init("pytorch", dk.InitOptions{Timeout: Timeout})
	if err != nil {
		j.Die("init", err)
	}
	j.Rank, j.Size = group.Rank(), group.Size()
	if j.Size < 2 {
		j.Die("world size", fmt.Errorf("needs 2 ranks or more, has %d", j.Size))
	}
	j.Check(j.WantGrow == (LauncherNumber("DISTKIT_MAX_REPLACEMENTS") > 0), "replacements in the grow variant only")
	j.Check(j.WantGrow || LauncherNumber("DISTKIT_MIN_RANKS") > 0, "the shrink variant runs under --min-ranks")
	j.Victim = j.Size / 2
	j.DieAt = int64(7 + j.Size)
	j.WantCommit = 1 + j.DieAt/CommitEvery
	j.CommitStep = j.DieAt / CommitEvery * CommitEvery
	return group
}

// Check counts a failed check (the job's verdict sums them over the final
// group).
func (j *Job) Check(ok bool, what string) {
	if !ok {
		fmt.Fprintf(os.Stderr, "rank %d: CHECK FAILED: %s\n", j.Rank, what)
		j.failures++
	}
}

// Die reports a failure the check cannot go on from and ends the process.
func (j *Job) Die(what string, err error) {
	fmt.Fprintf(os.Stderr, "rank %d: %s: %v\n", j.Rank, what, err)
	os.Exit(1)
}

// SigkillSelf is the victim's end in step: SIGKILLed, without a word to its
// peers.
func (j *Job) SigkillSelf(step int64) {
	fmt.Printf("rank %d: SIGKILL in step %d\n", j.Rank, step)
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal ends the process
}

// CheckJoined checks the commit the replacement loaded and its step.
func (j *Job) CheckJoined(commit, step int64) {
	j.Check(commit == j.WantCommit, "the replacement loads the newest commit")
	j.Check(step == j.CommitStep, "the replacement's step is the commit's")
}

// CheckRegroup checks the group a recovery made: grown back to the world's
// size under --max-replacements, else shrunk by the victim.
func (j *Job) CheckRegroup(next *dk.Group, grown bool) {
	j.Check(grown == j.WantGrow, "grown under --max-replacements, else shrunk")
	want := j.Size - 1
	if grown {
		want = j.Size
	}
	j.Check(next.Size() == want, "the new group's size")
}

// CheckRecovery reports the survivors' new group (CheckRegroup checked it)
// and checks the commit they loaded (how names the load: "loaded",
// "fetched").
func (j *Job) CheckRecovery(next *dk.Group, grown bool, how string, commit, step int64) {
	verb := "shrank"
	if grown {
		verb = "grew"
	}
	fmt.Printf("rank %d: %s to %d ranks, %s commit %d (step %d)\n", j.Rank, verb, next.Size(), how, commit, step)
	j.Check(commit == j.WantCommit, "the survivors load the newest commit")
	j.Check(step == j.CommitStep, "the step is the commit's: the steps since are redone")
}

// CheckTrained checks the steps this rank trained (the replacement from the
// commit, a survivor those since the commit twice) and its final weights w
// against the uninterrupted run from w0 (relative 1e-12: only the order of
// the partial sums differs).
func (j *Job) CheckTrained(w, w0 []float64, stepsRun int64, recoveries int) {
	if j.Newcomer {
		j.Check(stepsRun == Steps-j.CommitStep, "the replacement trains from the commit")
	} else {
		j.Check(recoveries == 1, "one recovery")
		j.Check(stepsRun == Steps+j.DieAt-j.CommitStep, "the steps since the commit are trained twice")
	}
	want := Reference(w0)
	for i := range want {
		if !(math.Abs(w[i]-want[i]) <= 1e-12*math.Abs(want[i])+1e-14) {
			fmt.Fprintf(os.Stderr, "rank %d: w[%d] = %.17g, the uninterrupted run's %.17g\n", j.Rank, i, w[i], want[i])
			j.Check(false, "final weights equal the uninterrupted run's")
		}
	}
}

// Failures is the job's verdict: every rank's failed checks summed over
// group, so a wrong rank fails every rank (and --min-ranks cannot let the
// job pass).
func (j *Job) Failures(group *dk.Group) float64 {
	bad := []float64{float64(j.failures)}
	if err := dk.AllReduce(group, bad, dk.Sum); err != nil {
		j.Die("the final all_reduce", err)
	}
	return bad[0]
}

// End ends the process with the job's verdict (from Failures, after the
// caller shut distkit down).
func (j *Job) End(failures float64, stepsRun int64) {
	if failures > 0 {
		fmt.Fprintf(os.Stderr, "rank %d: %g check(s) failed in the job\n", j.Rank, failures)
		os.Exit(1)
	}
	how := "shrank"
	if j.Newcomer {
		how = "joined as a replacement"
	} else if j.WantGrow {
		how = "grew back"
	}
	fmt.Printf("rank %d: %s; w equals the uninterrupted run's after %d steps\n", j.Rank, how, stepsRun)
}
